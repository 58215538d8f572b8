//! The membership view (issue 35): who the processes are, and announcing each change.

use super::*;

impl State {
    /// The membership view: every process slot's current process, unless declared failed.
    /// Its epoch counts changes — each declaration and each rejoin of a host — so a standby
    /// that replayed the log numbers views as its predecessor did.
    pub(super) fn view(&self) -> (u64, Vec<u32>) {
        let procs = self.cluster.procs();
        let Some(ctrl) = self
            .failure
            .as_ref()
            .ok()
            .and_then(|f| f.procedure.as_ref())
            .map(|ha| ha.controller())
        else {
            return (0, (0..procs).collect());
        };
        // A slot's process is a member once it bound — but one that joins the running cluster
        // only once it has rejoined under its new id.
        let bound = |h: u32| {
            self.slots.get(&Member::Process(h)).is_some_and(|s| {
                s.addr.is_some() && !(s.rejoin && ctrl.procs_of(NodeId(h)) == [ProcId(h)])
            })
        };
        let mut members: Vec<u32> = (0..procs)
            .filter(|&h| bound(h) && !ctrl.is_failed(NodeId(h)))
            .flat_map(|h| ctrl.procs_of(NodeId(h)).iter().map(|p| p.0))
            .collect();
        members.sort_unstable();
        (self.view_epoch, members)
    }

    /// Sends the view to every process (`joined`, `left`, `failed`: what changed; each
    /// change advances the epoch).
    pub(super) fn send_view(&mut self, joined: Vec<u32>, left: Vec<u32>, failed: Vec<u32>) {
        let changes = (joined.len() + left.len() + failed.len()) as u64;
        if changes == 0 {
            return;
        }
        self.view_epoch += changes;
        self.send_view_now(joined, left, failed);
    }

    /// Sends the current view to every process, its epoch unchanged.
    pub(super) fn send_view_now(&mut self, joined: Vec<u32>, left: Vec<u32>, failed: Vec<u32>) {
        let (epoch, members) = self.view();
        self.announced = members.iter().copied().collect();
        let msg = FromController::View {
            epoch,
            members,
            joined,
            left,
            failed,
        };
        self.send_to_each(|m| matches!(m, Member::Process(_)), &msg);
    }
}
