//! Structural equality of modules (filled in below).
