//! The measured stage parameters, `hstrace.parameters/v1`: per server and request class,
//! each stage's count, mean and percentiles over a window, the session cache's hit ratio,
//! the demands by stage class, the processes' CPU per connection.
//! - `v1`: the document, one type that writes and reads it (the contract)
//! - `estimator`: the sliding-window estimator, a sink, that makes it
//! - `architecture`: how a server holds its connections (event loop, prefork, threads)
//! - `format`: the same as CSV and as a table for people

pub mod architecture;
mod estimator;
pub mod format;
pub use hstrace_model::params::v1;

pub use estimator::{Estimator, Sample, MAX_SERVERS};
pub use v1::Parameters;
