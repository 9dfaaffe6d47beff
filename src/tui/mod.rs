//! The terminal UI: state in, frame out. It talks to the engine only through the engine handle.
