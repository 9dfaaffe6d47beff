//! Training the generic depth-one MTP head of a Llama-family target by self-distillation
//! (`cohort train-mtp`, docs/mtp-head.md).
//!
//! The target is frozen: it is run once over text to record its final-norm hidden states and its
//! own next-token predictions (`distill`), and the head learns, from the (h_t, x_{t+1}) sequence
//! exactly as the engine's MTP history presents it, to predict the target's prediction at t+1.
//! The head is written as pure functions over a map of named arrays (`functional`) so mlx-rs
//! autograd can differentiate it; a test pins it to the inference `mtp_forward`.

pub mod checkpoint;
pub mod corpus;
pub mod distill;
pub mod eval;
pub mod frozen;
pub mod functional;
pub mod head_file;
pub mod loss;
pub mod optim;
pub mod params;
pub mod progress;
pub mod trainer;
