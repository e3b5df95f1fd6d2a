//! Continuation addresses (`output.json#<stream>@<offset>`) and the pages they name (CONTRACT §5).
