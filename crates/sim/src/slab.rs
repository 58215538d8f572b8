//! Where packets live while they cross the simulated network: a slab of slots with a free list,
//! so events carry a `u32` index instead of a packet, and a freed slot is reused.

/// A slab of `T` addressed by `u32` slot indices.
#[derive(Debug)]
pub struct Slab<T> {
    slots: Vec<Option<T>>,
    free: Vec<u32>,
}

impl<T> Default for Slab<T> {
    fn default() -> Self {
        Slab {
            slots: Vec::new(),
            free: Vec::new(),
        }
    }
}

impl<T> Slab<T> {
    /// Stores `v` and returns its slot.
    pub fn insert(&mut self, v: T) -> u32 {
        match self.free.pop() {
            Some(i) => {
                self.slots[i as usize] = Some(v);
                i
            }
            None => {
                self.slots.push(Some(v));
                (self.slots.len() - 1) as u32
            }
        }
    }

    /// Removes and returns the value in slot `i`.
    ///
    /// # Panics
    /// If the slot is empty: the engine freed a packet twice.
    pub fn take(&mut self, i: u32) -> T {
        let v = self.slots[i as usize].take().expect("live slot");
        self.free.push(i);
        v
    }

    /// The value in slot `i`.
    ///
    /// # Panics
    /// If the slot is empty.
    pub fn get(&self, i: u32) -> &T {
        self.slots[i as usize].as_ref().expect("live slot")
    }

    /// Prefetch hint: starts loading slot `i` without reading it (see
    /// [`onepipe_proto::prefetch`]); nothing for a slot out of range.
    #[inline(always)]
    pub fn prefetch(&self, i: u32) {
        if let Some(slot) = self.slots.get(i as usize) {
            onepipe_proto::prefetch::prefetch(slot);
        }
    }

    /// The value in slot `i`, mutably.
    ///
    /// # Panics
    /// If the slot is empty.
    pub fn get_mut(&mut self, i: u32) -> &mut T {
        self.slots[i as usize].as_mut().expect("live slot")
    }
}
