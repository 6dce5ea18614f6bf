//! Host lists: `-H a:4,b:2` on the command line and hostfiles. The parsers live in the
//! `elastic` crate (discovery output reuses them); this module re-exports them so that
//! `crate::hosts::...` keeps working.

pub use ::elastic::hosts::*;
