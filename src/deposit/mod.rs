//! The inbox write path: litany's atomic, sender-namespaced deposit (CONTRACT §3).
