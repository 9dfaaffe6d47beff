//! Host kernels for MLX's CPU backend, which the layers route to: the affine-quantized product
//! (`cpu_qmm`) and the threads it splits over (`cpu_pool`), attention over the evaluated KV
//! buffer (`attention_cpu`), RoPE (`rope_host`), and the element-wise pieces of the host decode
//! path (`host_ops`).

pub mod attention_cpu;
pub mod cpu_pool;
pub mod cpu_qmm;
pub mod host_ops;
pub mod rope_host;
