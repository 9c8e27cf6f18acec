//! Running one kernel on the simulated device, shared by the kernel tests.

use ipu_isa::Instr;
use ipu_kernels::Kernel;
use ipu_kernels::code::{Code, m, setzi};
use ipu_sim::{Device, RunLimits};
use ipu_target::{MEMORY_BASE, Target};

const CODE: u32 = MEMORY_BASE;
const KERNEL: u32 = 0x4D000;
/// Where the vertex state is written.
pub const STATE: u32 = 0x50000;

/// Runs `kernel` once on tile 0 with `state` after writing `mem`; returns the device.
pub fn run(kernel: Kernel, state: &[u32], mem: &[(u32, Vec<u8>)]) -> Device {
    let mut dev = Device::new(Target::gc200(), 1);
    let k = ipu_kernels::generate(kernel).lay_out(KERNEL).unwrap();
    dev.write(0, KERNEL, &k.bytes).unwrap();
    let mut sup = Code::new();
    sup.op(setzi(m(2), KERNEL));
    sup.op(setzi(m(3), STATE));
    sup.op(Instr::Run {
        entry: m(2),
        state: m(3),
    });
    sup.op(Instr::WaitW);
    sup.op(Instr::Halt);
    let s = sup.lay_out(CODE).unwrap();
    dev.write(0, CODE, &s.bytes).unwrap();
    let words: Vec<u8> = state.iter().flat_map(|w| w.to_le_bytes()).collect();
    dev.write(0, STATE, &words).unwrap();
    for (addr, bytes) in mem {
        dev.write(0, *addr, bytes).unwrap();
    }
    dev.run(CODE, &RunLimits::default())
        .unwrap_or_else(|e| panic!("{kernel:?}: {e}"));
    dev
}
