//! An instance that runs no mirrors following the state topic (`engine.role = "follower"`, and
//! every standby): tailing the topic from the destination (`follower`), turning what it reads
//! into the control's views (`followed`), and writing what it says about mirror topics into the
//! instance's catalog while no engine term of the instance does (`writes`).

pub(crate) mod followed;
pub(crate) mod follower;
pub(crate) mod writes;
