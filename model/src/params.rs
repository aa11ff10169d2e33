//! `hstrace.parameters/v1`, the measured stage parameters the model reads and the tracer's
//! estimator writes (one type for both: `v1`). It lives with the model so that the model
//! needs nothing of the tracer; the tracer uses it as `hstrace::params::v1`.

pub mod v1;

pub use v1::Parameters;
