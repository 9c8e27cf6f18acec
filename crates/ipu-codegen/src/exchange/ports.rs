//! The busy intervals of exchange ports: a sender's port, a receiver's two lanes. The
//! backfilled schedules book rows into their gaps.

/// Busy intervals of one exchange port, sorted and disjoint (touching intervals merged).
#[derive(Debug, Default, Clone)]
pub(super) struct Port(Vec<(u32, u32)>);

impl Port {
    /// The earliest start at or after `t` of a free span of `dur` cycles.
    pub(super) fn earliest(&self, mut t: u32, dur: u32) -> u32 {
        let iv = &self.0;
        let mut i = iv.partition_point(|&(_, e)| e <= t);
        while i < iv.len() {
            if iv[i].0 >= t.saturating_add(dur) {
                return t;
            }
            t = t.max(iv[i].1);
            i += 1;
        }
        t
    }

    /// Marks `[s, e)` busy (free before, by construction).
    pub(super) fn book(&mut self, s: u32, e: u32) {
        let iv = &mut self.0;
        let i = iv.partition_point(|&(a, _)| a < s);
        let joins_prev = i > 0 && iv[i - 1].1 == s;
        let joins_next = i < iv.len() && iv[i].0 == e;
        match (joins_prev, joins_next) {
            (true, true) => {
                iv[i - 1].1 = iv[i].1;
                iv.remove(i);
            }
            (true, false) => iv[i - 1].1 = e,
            (false, true) => iv[i].0 = s,
            (false, false) => iv.insert(i, (s, e)),
        }
    }

    /// The end of its last busy interval.
    pub(super) fn end(&self) -> u32 {
        self.0.last().map_or(0, |&(_, e)| e)
    }
}

/// A tile's two receive lanes (see the module's notes on pairs).
#[derive(Debug, Default, Clone)]
pub(super) struct Lanes([Port; 2]);

impl Lanes {
    /// The earliest start at or after `t` of `dur` free cycles on one lane (`shared`) or on
    /// both.
    pub(super) fn earliest(&self, t: u32, dur: u32, shared: bool) -> u32 {
        let [a, b] = &self.0;
        if shared {
            return a.earliest(t, dur).min(b.earliest(t, dur));
        }
        let mut t = t;
        loop {
            let s = a.earliest(b.earliest(t, dur), dur);
            if s == t {
                return t;
            }
            t = s;
        }
    }

    /// Books `[s, s + dur)` (free by construction) on one lane (`shared`) or on both.
    pub(super) fn book(&mut self, s: u32, dur: u32, shared: bool) {
        let [a, b] = &mut self.0;
        if !shared {
            a.book(s, s + dur);
            b.book(s, s + dur);
        } else if a.earliest(s, dur) == s {
            a.book(s, s + dur);
        } else {
            b.book(s, s + dur);
        }
    }

    /// The end of the later lane's last busy interval.
    pub(super) fn end(&self) -> u32 {
        self.0[0].end().max(self.0[1].end())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_port_finds_the_first_gap_long_enough_and_merges_touching_spans() {
        let mut p = Port::default();
        p.book(10, 20);
        p.book(30, 40);
        assert_eq!(p.earliest(0, 10), 0);
        assert_eq!(p.earliest(0, 11), 40);
        assert_eq!(p.earliest(15, 10), 20);
        assert_eq!(p.earliest(21, 10), 40);
        p.book(20, 30);
        assert_eq!(p.0, [(10, 40)]);
        p.book(0, 10);
        p.book(40, 45);
        assert_eq!(p.0, [(0, 45)]);
        assert_eq!(p.end(), 45);
    }
}
