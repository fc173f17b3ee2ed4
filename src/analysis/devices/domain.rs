//! Device domains and their unification (union-find).
//!
//! A domain is either first-order (one [`VirtualDevice`], possibly only partly constrained) or a
//! function domain `fn(D1..Dn):Dr`. A function value lives on the device of its result. Unifying
//! a first-order domain with a function domain *collapses* the function: every parameter and the
//! result are unified with the first-order domain, at any depth.
//!
//! Every first-order root remembers the span of the annotation that first constrained it, so that
//! a clash can point at both annotations. An origin marked *fixed* (a fixed `on_device`) is kept
//! over the others, so that a clash involving a fixed annotation points at it.

use crate::ir::{Type, VirtualDevice};
use crate::source::Span;

/// A domain in [`Domains`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct DomId(u32);

#[derive(Clone, Debug)]
enum Node {
    First {
        device: VirtualDevice,
        origin: Option<Span>,
        fixed: bool,
    },
    Func {
        params: Vec<DomId>,
        result: DomId,
    },
}

/// Two domains that cannot be unified.
#[derive(Clone, Debug)]
pub(crate) enum Clash {
    /// Two devices with a field set to different values, each with where it was required.
    Devices(Box<[(VirtualDevice, Option<Span>); 2]>),
    /// Function domains with different numbers of parameters.
    Shape,
}

/// The domain store.
#[derive(Default)]
pub(crate) struct Domains {
    nodes: Vec<Node>,
    parent: Vec<u32>,
    /// How many times defaulting changed a device (to detect a fixed point).
    pub changes: u64,
}

impl Domains {
    fn push(&mut self, n: Node) -> DomId {
        let id = self.nodes.len() as u32;
        self.nodes.push(n);
        self.parent.push(id);
        DomId(id)
    }

    /// A first-order domain on `device`, constrained by the annotation at `origin`.
    pub fn first(&mut self, device: VirtualDevice, origin: Option<Span>) -> DomId {
        self.push(Node::First {
            device,
            origin,
            fixed: false,
        })
    }

    /// A first-order domain on `device`, constrained by the fixed annotation at `origin`.
    pub fn first_fixed(&mut self, device: VirtualDevice, origin: Span) -> DomId {
        self.push(Node::First {
            device,
            origin: Some(origin),
            fixed: true,
        })
    }

    /// A function domain.
    pub fn func(&mut self, params: Vec<DomId>, result: DomId) -> DomId {
        self.push(Node::Func { params, result })
    }

    /// A fresh, unconstrained domain shaped by a type: function types give function domains
    /// (recursively); every other type, or an unknown one, gives a first-order domain. The
    /// recursion is bounded by the type nesting limit of the parser.
    pub fn for_type(&mut self, ty: Option<&Type>) -> DomId {
        match ty {
            Some(Type::Func(ft)) => {
                let params = ft.params.iter().map(|p| self.for_type(Some(p))).collect();
                let result = self.for_type(Some(&ft.ret));
                self.func(params, result)
            }
            _ => self.first(VirtualDevice::unconstrained(), None),
        }
    }

    /// The representative of a domain's class.
    pub fn find(&mut self, d: DomId) -> DomId {
        let mut root = d.0;
        while self.parent[root as usize] != root {
            root = self.parent[root as usize];
        }
        let mut x = d.0;
        while self.parent[x as usize] != root {
            let next = self.parent[x as usize];
            self.parent[x as usize] = root;
            x = next;
        }
        DomId(root)
    }

    /// The first-order domain a value of this domain lives in (the innermost result).
    pub fn result_of(&mut self, d: DomId) -> DomId {
        let mut d = self.find(d);
        // Well-typed programs have no cyclic function domains; the bound guards the others.
        let mut steps = self.nodes.len();
        while let Node::Func { result, .. } = &self.nodes[d.0 as usize] {
            if steps == 0 {
                break;
            }
            steps -= 1;
            let r = *result;
            d = self.find(r);
        }
        d
    }

    /// The device a value of this domain lives on.
    pub fn device(&mut self, d: DomId) -> VirtualDevice {
        let r = self.result_of(d);
        match &self.nodes[r.0 as usize] {
            Node::First { device, .. } => device.clone(),
            Node::Func { .. } => VirtualDevice::unconstrained(),
        }
    }

    /// The parameter domains of a function domain (`None` for a first-order domain).
    pub fn params(&mut self, d: DomId) -> Option<Vec<DomId>> {
        let r = self.find(d);
        match &self.nodes[r.0 as usize] {
            Node::Func { params, .. } => Some(params.clone()),
            Node::First { .. } => None,
        }
    }

    /// Unifies two domains. On a clash the store may be left partly unified; callers report the
    /// clash and stop after the phase.
    pub fn unify(&mut self, a: DomId, b: DomId) -> Result<(), Clash> {
        let mut work = vec![(a, b)];
        while let Some((a, b)) = work.pop() {
            let (ra, rb) = (self.find(a), self.find(b));
            if ra == rb {
                continue;
            }
            match (
                self.nodes[ra.0 as usize].clone(),
                self.nodes[rb.0 as usize].clone(),
            ) {
                (
                    Node::First {
                        device: da,
                        origin: oa,
                        fixed: fa,
                    },
                    Node::First {
                        device: db,
                        origin: ob,
                        fixed: fb,
                    },
                ) => {
                    let Some(joined) = da.join(&db) else {
                        return Err(Clash::Devices(Box::new([(da, oa), (db, ob)])));
                    };
                    let (origin, fixed) = if fa && !da.is_unconstrained() {
                        (oa, true)
                    } else if fb && !db.is_unconstrained() {
                        (ob, true)
                    } else {
                        match (&oa, da.is_unconstrained()) {
                            (Some(_), false) => (oa, false),
                            _ => (ob.or(oa), false),
                        }
                    };
                    self.nodes[rb.0 as usize] = Node::First {
                        device: joined,
                        origin,
                        fixed,
                    };
                    self.parent[ra.0 as usize] = rb.0;
                }
                (
                    Node::Func {
                        params: pa,
                        result: ra_,
                    },
                    Node::Func {
                        params: pb,
                        result: rb_,
                    },
                ) => {
                    if pa.len() != pb.len() {
                        return Err(Clash::Shape);
                    }
                    self.parent[ra.0 as usize] = rb.0;
                    work.push((ra_, rb_));
                    work.extend(pa.into_iter().zip(pb).rev());
                }
                (Node::First { .. }, Node::Func { params, result }) => {
                    self.parent[rb.0 as usize] = ra.0;
                    work.push((result, ra));
                    work.extend(params.into_iter().map(|p| (p, ra)).rev());
                }
                (Node::Func { params, result }, Node::First { .. }) => {
                    self.parent[ra.0 as usize] = rb.0;
                    work.push((result, rb));
                    work.extend(params.into_iter().map(|p| (p, rb)).rev());
                }
            }
        }
        Ok(())
    }

    /// Fills the unset fields of a domain from `default`: the result first, then every parameter
    /// from the (now defaulted) result device. Never fails, since defaulting keeps set fields.
    pub fn set_default(&mut self, d: DomId, default: &VirtualDevice) {
        self.set_default_within(d, default, 2 * crate::ir::MAX_DEPTH);
    }

    fn set_default_within(&mut self, d: DomId, default: &VirtualDevice, depth: u32) {
        let r = self.find(d);
        match self.nodes[r.0 as usize].clone() {
            Node::First {
                device,
                origin,
                fixed,
            } => {
                let filled = device.default_from(default);
                if filled != device {
                    self.changes += 1;
                    self.nodes[r.0 as usize] = Node::First {
                        device: filled,
                        origin,
                        fixed,
                    };
                }
            }
            Node::Func { params, result } if depth > 0 => {
                self.set_default_within(result, default, depth - 1);
                let rv = self.device(result);
                for p in params {
                    self.set_default_within(p, &rv, depth - 1);
                }
            }
            Node::Func { .. } => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cpu() -> VirtualDevice {
        VirtualDevice::for_device(1, 0)
    }

    fn gpu() -> VirtualDevice {
        VirtualDevice::for_device(2, 0)
    }

    #[test]
    fn first_order_domains_join_or_clash() {
        let mut d = Domains::default();
        let a = d.first(VirtualDevice::unconstrained(), None);
        let b = d.first(cpu(), None);
        d.unify(a, b).unwrap();
        assert_eq!(d.device(a), cpu());
        let c = d.first(gpu(), None);
        assert!(matches!(d.unify(a, c), Err(Clash::Devices(_))));
    }

    #[test]
    fn collapse_forces_params_and_result() {
        let mut d = Domains::default();
        let p = d.first(VirtualDevice::unconstrained(), None);
        let r = d.first(VirtualDevice::unconstrained(), None);
        let f = d.func(vec![p], r);
        let g = d.first(gpu(), None);
        d.unify(f, g).unwrap();
        assert_eq!(d.device(p), gpu());
        assert_eq!(d.device(r), gpu());
    }

    #[test]
    fn defaulting_fills_result_then_params() {
        let mut d = Domains::default();
        let p = d.first(VirtualDevice::unconstrained(), None);
        let r = d.first(VirtualDevice::for_device(2, 1), None);
        let f = d.func(vec![p], r);
        d.set_default(f, &cpu());
        assert_eq!(d.device(p), VirtualDevice::for_device(2, 1));
    }
}
