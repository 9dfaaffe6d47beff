//! Model loading and layers: one file per family or layer kind.
