// A worker kernel and its supervisor: every directive, a bundle, rpt, post-increments.
        .equ ROWS, 4
        .equ STRIDE, 8 * 2

main:   setzi $m1, worker
        setzi $m2, state
        run $m1, $m2
        waitw
        sync
        halt
        .align 8
worker: ld32 $m1, $m0, 0
        ld32 $m2, $m0, 4
        setzi $m3, ROWS - 1
row:    ld64step $a0:1, $m1+=8
        { add $m4, $m4, 1 ; f32v2add $a2:3, $a0:1, $a0:1 }
        st64step $a2:3, $m2+=8
        brnzdec $m3, row
        rpt 3, 1
        nop
        exit
        .section .data, 0x80000
state:  .word 0x80100, 0x80200
        .zero STRIDE
