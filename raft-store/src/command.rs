//! The command a log entry carries, decoded and encoded once.
//!
//! An entry's command is read in three places on a leader (the log's tail
//! cache hands a copy to the replication of each follower and to apply) and
//! written in two (the log and each follower's AppendEntries). Holding the
//! decoded command and its protobuf encoding behind reference counts makes
//! every copy a pair of counter increments, and every write a copy of bytes
//! made once: a leader encodes a command when it proposes it, a follower
//! keeps the bytes it received.

use std::fmt;
use std::sync::Arc;

use om_proto::store::Command;
use prost::Message;
use prost::bytes::Bytes;

use crate::io_err;

/// A command with its protobuf encoding, shared by reference; the two always
/// agree (there is no way to change one without the other).
#[derive(Clone)]
pub struct SharedCommand {
    command: Arc<Command>,
    encoded: Bytes,
}

impl SharedCommand {
    /// Wraps a command a leader proposes, encoding it.
    pub fn new(command: Command) -> SharedCommand {
        let encoded = Bytes::from(command.encode_to_vec());
        SharedCommand {
            command: Arc::new(command),
            encoded,
        }
    }

    /// Decodes a command received or read back from the log, keeping its
    /// bytes (the log and the network store them as they came).
    pub fn decode(encoded: Bytes) -> std::io::Result<SharedCommand> {
        let command = Command::decode(encoded.as_ref()).map_err(io_err)?;
        Ok(SharedCommand {
            command: Arc::new(command),
            encoded,
        })
    }

    pub fn command(&self) -> &Command {
        &self.command
    }

    /// The command's protobuf encoding.
    pub fn encoded(&self) -> &Bytes {
        &self.encoded
    }
}

impl From<Command> for SharedCommand {
    fn from(command: Command) -> SharedCommand {
        SharedCommand::new(command)
    }
}

impl fmt::Debug for SharedCommand {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.command, f)
    }
}

/// Names the operation only, as `Command`'s own `Display` does.
impl fmt::Display for SharedCommand {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&*self.command, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use om_proto::store::command::Op;
    use om_proto::store::{PutKey, RenamePath};

    #[test]
    fn a_copy_shares_the_command_and_its_bytes() {
        let cmd = Command {
            client_id: "c".into(),
            seq: 7,
            now_ms: 1_700_000_000_000,
            op: Some(Op::PutKey(PutKey {
                volume: "v".into(),
                key: "k".repeat(300),
                ..Default::default()
            })),
            ..Default::default()
        };
        let shared = SharedCommand::new(cmd.clone());
        assert_eq!(shared.encoded().as_ref(), cmd.encode_to_vec().as_slice());
        let copy = shared.clone();
        assert!(std::ptr::eq(copy.command(), shared.command()));
        assert_eq!(copy.encoded().as_ptr(), shared.encoded().as_ptr());
        let decoded = SharedCommand::decode(shared.encoded().clone()).unwrap();
        assert_eq!(decoded.command(), &cmd);
        assert_eq!(decoded.encoded(), shared.encoded());
    }

    #[test]
    fn bytes_that_are_no_command_are_refused() {
        assert!(SharedCommand::decode(Bytes::from_static(&[0xff, 0xff, 0xff])).is_err());
        let rename = SharedCommand::new(Command {
            op: Some(Op::RenamePath(RenamePath::default())),
            ..Default::default()
        });
        assert_eq!(rename.to_string(), "RenamePath");
    }
}
