use std::collections::VecDeque;

use crate::core::sm::CommandSeq;
use crate::engine::Command;
use crate::RaftTypeConfig;

/// The entry of output from Engine to the runtime.
#[derive(Debug, Default)]
pub(crate) struct EngineOutput<C>
where C: RaftTypeConfig
{
    /// A Engine level sequence number for identifying a command.
    pub(crate) seq: CommandSeq,

    /// Command queue that need to be executed by `RaftRuntime`.
    pub(crate) commands: VecDeque<Command<C>>,
}

impl<C> EngineOutput<C>
where C: RaftTypeConfig
{
    /// Generate the next command seq of an sm::Command.
    pub(crate) fn next_sm_seq(&mut self) -> CommandSeq {
        self.seq += 1;
        self.seq
    }

    /// Get the last used sm::Command seq
    pub(crate) fn last_sm_seq(&self) -> CommandSeq {
        self.seq
    }

    pub(crate) fn new(command_buffer_size: usize) -> Self {
        Self {
            seq: 0,
            commands: VecDeque::with_capacity(command_buffer_size),
        }
    }

    /// Push a command to the queue.
    pub(crate) fn push_command(&mut self, mut cmd: Command<C>) {
        tracing::debug!("push command: {:?}", cmd);

        match &mut cmd {
            Command::StateMachine { command } => {
                let seq = self.next_sm_seq();
                tracing::debug!("next_seq: {}", seq);
                command.set_seq(seq);
            }
            Command::BecomeLeader => {}
            Command::QuitLeader => {}
            Command::AppendInputEntries { .. } => {}
            Command::ReplicateCommitted { .. } => {}
            Command::Commit { .. } => {}
            Command::Replicate { .. } => {}
            Command::RebuildReplicationStreams { .. } => {}
            Command::SaveVote { .. } => {}
            Command::SendVote { .. } => {}
            Command::PurgeLog { .. } => {}
            Command::DeleteConflictLog { .. } => {}
            Command::Respond { .. } => {}
        }
        self.commands.push_back(cmd)
    }

    /// Sluice patch (group commit): move into `entries` the entries of the `AppendInputEntries`
    /// commands queued for the same `vote` whose entries follow those in `entries`, up to
    /// `max_entries` in all. Only `Replicate`, `ReplicateCommitted`, `Commit` and `Respond`
    /// commands may stand between them (left where they are: each of them is as valid, or
    /// more, with more entries already written before it); any other command ends the scan (a
    /// vote saved, a log truncated or purged, a change of role or membership).
    pub(crate) fn take_following_appends(
        &mut self,
        vote: &crate::Vote<C::NodeId>,
        entries: &mut Vec<C::Entry>,
        max_entries: usize,
    ) {
        use crate::RaftLogId;

        let mut i = 0;
        while i < self.commands.len() && entries.len() < max_entries {
            match &self.commands[i] {
                Command::AppendInputEntries { vote: v, entries: next } => {
                    let follows = match (entries.last(), next.first()) {
                        (Some(last), Some(first)) => first.get_log_id().index == last.get_log_id().index + 1,
                        _ => false,
                    };
                    if v != vote || !follows || entries.len() + next.len() > max_entries {
                        return;
                    }
                    if let Some(Command::AppendInputEntries { entries: next, .. }) = self.commands.remove(i) {
                        entries.extend(next);
                    }
                }
                Command::Replicate { .. }
                | Command::ReplicateCommitted { .. }
                | Command::Commit { .. }
                | Command::Respond { .. } => i += 1,
                _ => return,
            }
        }
    }

    /// Put back the command to the head of the queue.
    ///
    /// This will be used when the command is not ready to be executed.
    pub(crate) fn postpone_command(&mut self, cmd: Command<C>) {
        tracing::debug!("postpone command: {:?}", cmd);
        self.commands.push_front(cmd)
    }

    /// Pop the first command to run from the queue.
    pub(crate) fn pop_command(&mut self) -> Option<Command<C>> {
        self.commands.pop_front()
    }

    /// Iterate all queued commands.
    pub(crate) fn iter_commands(&self) -> impl Iterator<Item = &Command<C>> {
        self.commands.iter()
    }

    /// Take all queued commands and clear the queue.
    #[cfg(test)]
    pub(crate) fn take_commands(&mut self) -> Vec<Command<C>> {
        self.commands.drain(..).collect()
    }

    /// Clear all queued commands.
    #[cfg(test)]
    pub(crate) fn clear_commands(&mut self) {
        self.commands.clear()
    }
}
