        .equ N, 8
main:   setzi $m1, N
        setzi $m2, 0x50000
loop:   st32step $m1, $m2+=4
        brnzdec $m1, loop
        sync
        halt
