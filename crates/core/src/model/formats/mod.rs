//! What a checkpoint is on disk: the small text files of a model directory read with a size bound
//! (`files`), its safetensors tensors, single, sharded or with an MTP sidecar (`weights`), and
//! GGUF: the reader (`gguf`) and the import of a llama-architecture GGUF as an MLX checkpoint
//! (`gguf_import`), its tokenizer rebuilt from the GGUF metadata (`gguf_tokenizer`). The
//! families build their models from [`weights::Weights`]; finding and loading a model is
//! [`super::load`].

pub mod files;
pub mod gguf;
pub mod gguf_import;
pub mod gguf_tokenizer;
pub mod weights;
