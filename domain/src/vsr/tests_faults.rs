//! Fault-path unit tests of the VSR replica.
