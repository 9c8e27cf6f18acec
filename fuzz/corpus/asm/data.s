        .section .data, 0x80000
table:  .word 1, 2, 3, (4 << 2) | 1, -5, ~0
        .half 0x1234, 7
        .byte 1, 2, 3
        .align 8
        .float 1.5, -0.25
        .zero 16
