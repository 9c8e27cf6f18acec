# AMP matmul benchmark kernel: Y[ROWS,16] = X[ROWS,16] x W[16,16], f16 inputs, f16 partials.
#
# Specialised by assembler defines (defaults below):
#   ROWS     rows of X and Y on this tile
#   WEIGHTS  address of W (16 x 16 f16, k-major: W[k][n] at WEIGHTS + 2*(16*k + n)); 16-byte
#            aligned, interleaved memory
#   X        address of X (row-major f16), followed by 16 bytes the pipeline may over-read
#   Y        address of Y (row-major f16)
#
# The supervisor selects the f16->f16 AMP mode, loads the weights, launches six workers on
# contiguous shares of the rows and waits. Each worker streams its rows through the AMP: one
# `amp` phase per 4 K-values, four phases per row, each co-issued with the paced load of the
# next input chunk and the store of the previous output chunk, inside an `rpt` loop: four issue
# slots per row per worker, so six workers sustain one row every 4 tile cycles.

.equ ROWS, 2048
.equ WEIGHTS, 0x80000
.equ X, 0x80200
.equ Y, X + 32 * ROWS + 64

.equ STATE_BYTES, 24

main:
        ampcfg  f16f16
        setzi   $m1, WEIGHTS
        ampw    $m1
        setzi   $m2, worker
        setzi   $m3, states
        run     $m2, $m3
        add     $m3, $m3, STATE_BYTES
        run     $m2, $m3
        add     $m3, $m3, STATE_BYTES
        run     $m2, $m3
        add     $m3, $m3, STATE_BYTES
        run     $m2, $m3
        add     $m3, $m3, STATE_BYTES
        run     $m2, $m3
        add     $m3, $m3, STATE_BYTES
        run     $m2, $m3
        waitw
        halt

# Worker: $m0 = vertex state {in, out, rows, rows - 1, 0, 0}.
# Slot s (s = 0 .. 4*rows+3) runs AMP phase s%4 on input chunk s (chunks past the end are
# don't-care: they only feed the drain row) and returns output chunk s-4; the store in slot s+1
# writes it. Register use: $a0:1 the input chunk, $a4:5 the output chunk, $a14:15 zero
# partials, $m1 input pointer, $m2 output pointer, $m3 loop count.
        .align  8
worker:
        ld32    $m1, $m0, 0
        ld32    $m2, $m0, 4
        ld64    $a14:15, $m0, 16
        ld64step $a0:1, $m1+=8
        # Fill: row 0 and phase 0 of row 1; nothing to store yet.
        { ld64step $a0:1, $m1+=8 ; amp $a4:5, $a0:1, $a14:15, 0 }
        { ld64step $a0:1, $m1+=8 ; amp $a4:5, $a0:1, $a14:15, 1 }
        { ld64step $a0:1, $m1+=8 ; amp $a4:5, $a0:1, $a14:15, 2 }
        { ld64step $a0:1, $m1+=8 ; amp $a4:5, $a0:1, $a14:15, 3 }
        { ld64step $a0:1, $m1+=8 ; amp $a4:5, $a0:1, $a14:15, 0 }
        ld32    $m3, $m0, 12
        rpt     $m3, 4
        { ldst64pace $a0:1, $a4:5, $m1+=8, $m2+=8 ; amp $a4:5, $a0:1, $a14:15, 1 }
        { ldst64pace $a0:1, $a4:5, $m1+=8, $m2+=8 ; amp $a4:5, $a0:1, $a14:15, 2 }
        { ldst64pace $a0:1, $a4:5, $m1+=8, $m2+=8 ; amp $a4:5, $a0:1, $a14:15, 3 }
        { ldst64pace $a0:1, $a4:5, $m1+=8, $m2+=8 ; amp $a4:5, $a0:1, $a14:15, 0 }
        # Drain: the last row's outputs.
        { st64step $a4:5, $m2+=8 ; amp $a4:5, $a0:1, $a14:15, 1 }
        { st64step $a4:5, $m2+=8 ; amp $a4:5, $a0:1, $a14:15, 2 }
        { st64step $a4:5, $m2+=8 ; amp $a4:5, $a0:1, $a14:15, 3 }
        st64step $a4:5, $m2+=8
        exit

# Vertex states: worker i takes rows [ROWS*i/6, ROWS*(i+1)/6).
        .align  8
states:
        .word   X + 32 * (ROWS * 0 / 6), Y + 32 * (ROWS * 0 / 6), ROWS * 1 / 6 - ROWS * 0 / 6, ROWS * 1 / 6 - ROWS * 0 / 6 - 1, 0, 0
        .word   X + 32 * (ROWS * 1 / 6), Y + 32 * (ROWS * 1 / 6), ROWS * 2 / 6 - ROWS * 1 / 6, ROWS * 2 / 6 - ROWS * 1 / 6 - 1, 0, 0
        .word   X + 32 * (ROWS * 2 / 6), Y + 32 * (ROWS * 2 / 6), ROWS * 3 / 6 - ROWS * 2 / 6, ROWS * 3 / 6 - ROWS * 2 / 6 - 1, 0, 0
        .word   X + 32 * (ROWS * 3 / 6), Y + 32 * (ROWS * 3 / 6), ROWS * 4 / 6 - ROWS * 3 / 6, ROWS * 4 / 6 - ROWS * 3 / 6 - 1, 0, 0
        .word   X + 32 * (ROWS * 4 / 6), Y + 32 * (ROWS * 4 / 6), ROWS * 5 / 6 - ROWS * 4 / 6, ROWS * 5 / 6 - ROWS * 4 / 6 - 1, 0, 0
        .word   X + 32 * (ROWS * 5 / 6), Y + 32 * (ROWS * 5 / 6), ROWS * 6 / 6 - ROWS * 5 / 6, ROWS * 6 / 6 - ROWS * 5 / 6 - 1, 0, 0
