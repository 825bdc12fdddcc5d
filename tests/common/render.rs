//! A Python-repr-like rendering of arena values, iterative so deep values render.

use tensorplay::torch::policy::Global;
use tensorplay::torch::TensorKind;
use tensorplay::torch::{Arena, Node, Torch};
use tensorplay::value::{DictClass, NodeId};

enum Step {
    Node(NodeId, usize),
    Text(&'static str),
}

pub fn render(arena: &Arena, root: NodeId) -> String {
    let mut out = String::new();
    let mut stack = vec![Step::Node(root, 0)];
    while let Some(step) = stack.pop() {
        let (id, depth) = match step {
            Step::Text(t) => {
                out.push_str(t);
                continue;
            }
            Step::Node(id, depth) => (id, depth),
        };
        if depth > 64 {
            out.push_str("...");
            continue;
        }
        let seq =
            |stack: &mut Vec<Step>, open: &'static str, close: &'static str, items: Vec<NodeId>| {
                stack.push(Step::Text(close));
                for (i, item) in items.iter().enumerate().rev() {
                    stack.push(Step::Node(*item, depth + 1));
                    if i > 0 {
                        stack.push(Step::Text(", "));
                    }
                }
                stack.push(Step::Text(open));
            };
        match arena.get(id) {
            Node::None => out.push_str("None"),
            Node::Bool(b) => out.push_str(if *b { "True" } else { "False" }),
            Node::Int(i) => out.push_str(&i.to_string()),
            Node::BigInt(b) => out.push_str(&format!("bigint({})", hex(b))),
            Node::DecimalInt(t) => out.push_str(t),
            Node::Float(f) => out.push_str(&format!("{f:?}")),
            Node::Complex(c) => out.push_str(&format!("({:?}+{:?}j)", c.0, c.1)),
            Node::Str(s) => {
                out.push_str(&format!("{:?}", String::from_utf8_lossy(arena.payload(*s))))
            }
            Node::Bytes(b) => out.push_str(&format!("b'{}'", hex(arena.payload(*b)))),
            Node::ByteArray(b) => {
                out.push_str(&format!("bytearray(b'{}')", hex(arena.payload(*b))))
            }
            Node::Tuple(items) => {
                let close = if items.len() == 1 { ",)" } else { ")" };
                seq(&mut stack, "(", close, arena.items(*items).to_vec())
            }
            Node::List(items) => seq(&mut stack, "[", "]", items.to_vec()),
            Node::Dict(class, d) => {
                let d = arena.dict(*d);
                let open = match class {
                    DictClass::Dict => "{",
                    DictClass::OrderedDict => "OrderedDict{",
                    DictClass::Counter => "Counter{",
                };
                stack.push(Step::Text("}"));
                for (i, (k, v)) in d.items.iter().enumerate().rev() {
                    stack.push(Step::Node(*v, depth + 1));
                    stack.push(Step::Text(": "));
                    stack.push(Step::Node(*k, depth + 1));
                    if i > 0 {
                        stack.push(Step::Text(", "));
                    }
                }
                stack.push(Step::Text(open));
            }
            Node::Set(s) => seq(
                &mut stack,
                if s.frozen { "frozenset{" } else { "set{" },
                "}",
                s.items.clone(),
            ),
            Node::Domain(Torch::Global(Global::Builtin(b))) => out.push_str(&b.full_name()),
            Node::Domain(Torch::Global(Global::User(i))) => out.push_str(&format!("user#{i}")),
            Node::Domain(Torch::Global(Global::Stub(i))) => out.push_str(&format!("stub#{i}")),
            Node::Domain(Torch::Size(d)) => out.push_str(&format!("Size({d:?})")),
            Node::Domain(Torch::Device(d)) => out.push_str(&format!("device({d})")),
            Node::Domain(Torch::Layout(l)) => out.push_str(l.name()),
            Node::Domain(Torch::Storage(s)) => out.push_str(&format!("storage#{}", s.0)),
            Node::Domain(Torch::Tensor(t)) => match &arena.tensor(*t).kind {
                TensorKind::Dense(d) => out.push_str(&format!(
                    "tensor({} s{} +{} {:?} {:?}{})",
                    d.dtype.name(),
                    d.storage.0,
                    d.offset,
                    d.shape,
                    d.stride,
                    if arena.tensor(*t).requires_grad {
                        " grad"
                    } else {
                        ""
                    }
                )),
                other => out.push_str(&format!("tensor<{:?}>", std::mem::discriminant(other))),
            },
            Node::Object(_) => out.push_str("object"),
            Node::Domain(Torch::NdArray(a)) => match &a.state {
                Some(st) => out.push_str(&format!("ndarray({} {:?})", st.dtype.descr(), st.shape)),
                None => out.push_str("ndarray(unbuilt)"),
            },
            Node::Domain(Torch::NpDtype(d)) => out.push_str(&format!("dtype({})", d.descr())),
            Node::Domain(Torch::NpScalar(d, _)) => out.push_str(&format!("scalar({})", d.descr())),
            Node::Opaque => out.push('?'),
        }
    }
    out
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}
