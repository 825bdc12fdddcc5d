//! Stable signals for the Rust core: the pickle VM, the archive reader, a whole
//! checkpoint open and a scan, on a synthetic 50,000-tensor state dict shaped
//! exactly like torch's output. Wall time is noisy on a shared machine, so
//! `benches/instructions.py` runs each workload once under callgrind and compares
//! instruction counts instead; this binary only provides the workloads.
//!
//! `cargo bench --bench core --no-default-features` prints wall times;
//! `core --once <workload>` runs one workload once (what callgrind measures).

#[path = "../tests/common/zipw.rs"]
mod zipw;

use std::hint::black_box;
use std::sync::Arc;
use std::time::Instant;

use tensorplay::archive::source::Source;
use tensorplay::archive::zip;
use tensorplay::checkpoint::LoadOptions;
use tensorplay::pickle::machine::{self, StringEncoding};
use tensorplay::scan::{self, ScanOptions};
use tensorplay::torch::policy::UserGlobals;
use tensorplay::torch::records::{self, Layout};
use tensorplay::torch::Arena;
use tensorplay::torch::IdFormat;
use tensorplay::torch::{Refusals, TorchHooks};
use tensorplay::Limits;

const TENSORS: usize = 50_000;

/// Writes pickle opcodes with torch's memoization: every new object is memoized
/// (BINPUT, LONG_BINPUT past 255) and repeats are BINGETs.
struct Pickler {
    out: Vec<u8>,
    memo: u32,
}

impl Pickler {
    fn put(&mut self) -> u32 {
        let id = self.memo;
        if id < 256 {
            self.out.extend_from_slice(&[b'q', id as u8]);
        } else {
            self.out.push(b'r');
            self.out.extend_from_slice(&id.to_le_bytes());
        }
        self.memo += 1;
        id
    }

    fn get(&mut self, id: u32) {
        if id < 256 {
            self.out.extend_from_slice(&[b'h', id as u8]);
        } else {
            self.out.push(b'j');
            self.out.extend_from_slice(&id.to_le_bytes());
        }
    }

    fn str(&mut self, s: &str) -> u32 {
        self.out.push(b'X');
        self.out.extend_from_slice(&(s.len() as u32).to_le_bytes());
        self.out.extend_from_slice(s.as_bytes());
        self.put()
    }

    fn int(&mut self, i: u32) {
        if i < 256 {
            self.out.extend_from_slice(&[b'K', i as u8]);
        } else {
            self.out.push(b'J');
            self.out.extend_from_slice(&i.to_le_bytes());
        }
    }

    fn global(&mut self, module: &str, name: &str) -> u32 {
        self.out.push(b'c');
        self.out
            .extend_from_slice(format!("{module}\n{name}\n").as_bytes());
        self.put()
    }
}

/// `torch.save` of `{f"layers.{i}.weight": torch.zeros(4, 2) for i in range(n)}`.
fn state_dict_pickle(n: usize) -> Vec<u8> {
    let mut p = Pickler {
        out: b"\x80\x02}".to_vec(),
        memo: 0,
    };
    p.put();
    p.out.push(b'(');
    let mut memo: Option<[u32; 5]> = None;
    for i in 0..n {
        p.str(&format!("layers.{i}.weight"));
        let rebuild = match memo {
            Some(m) => {
                p.get(m[0]);
                m[0]
            }
            None => p.global("torch._utils", "_rebuild_tensor_v2"),
        };
        p.out.extend_from_slice(b"((");
        let (storage, float, cpu) = match memo {
            Some(m) => {
                p.get(m[1]);
                p.get(m[2]);
                (m[1], m[2], m[3])
            }
            None => (p.str("storage"), p.global("torch", "FloatStorage"), 0),
        };
        p.str(&i.to_string());
        let cpu = match memo {
            Some(_) => {
                p.get(cpu);
                cpu
            }
            None => p.str("cpu"),
        };
        p.int(8);
        p.out.push(b't');
        p.put();
        p.out.push(b'Q');
        p.int(0);
        p.int(4);
        p.int(2);
        p.out.push(0x86);
        p.put();
        p.int(2);
        p.int(1);
        p.out.push(0x86);
        p.put();
        p.out.push(0x89);
        let ordered = match memo {
            Some(m) => {
                p.get(m[4]);
                m[4]
            }
            None => p.global("collections", "OrderedDict"),
        };
        p.out.extend_from_slice(b")R");
        p.put();
        p.out.push(b't');
        p.put();
        p.out.push(b'R');
        p.put();
        memo = Some([rebuild, storage, float, cpu, ordered]);
    }
    p.out.extend_from_slice(b"u.");
    p.out
}

fn checkpoint(n: usize) -> Vec<u8> {
    let pickle = state_dict_pickle(n);
    let payload = [0u8; 32];
    let names: Vec<String> = (0..n).map(|i| format!("data/{i}")).collect();
    let records: Vec<(&str, &[u8])> = names.iter().map(|k| (k.as_str(), &payload[..])).collect();
    zipw::checkpoint(&pickle, &records)
}

/// Bytes that look like float32 weights: each a pseudo-random value, so the
/// first byte of a tensor's bytes is an opcode about as often as in real files.
fn weights(len: usize, seed: u64) -> Vec<u8> {
    let mut state = seed | 1;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect()
}

/// A Hugging Face model repository as a clone holds it (GPT-2's layout: 148
/// tensors in pytorch_model.bin and model.safetensors, the tokenizer's files,
/// configs, a model card), each file to be scanned as a folder scan scans it.
fn model_folder() -> Vec<(&'static str, Vec<u8>)> {
    const TENSORS: usize = 148;
    let pickle = state_dict_pickle(TENSORS);
    let payloads: Vec<Vec<u8>> = (0..TENSORS).map(|i| weights(4096, i as u64)).collect();
    let names: Vec<String> = (0..TENSORS).map(|i| format!("data/{i}")).collect();
    let records: Vec<(&str, &[u8])> = (names.iter().zip(&payloads))
        .map(|(k, p)| (k.as_str(), p.as_slice()))
        .collect();
    let vocab: Vec<String> = (0..20_000).map(|i| format!("\"tok{i}\": {i}")).collect();
    let merges: Vec<String> = (0..20_000).map(|i| format!("t{i} o{i}")).collect();
    let tokenizer = format!(
        "{{\"version\": \"1.0\", \"model\": {{\"type\": \"BPE\", \"vocab\": {{{}}}, \"merges\": [{}]}}}}",
        vocab.join(", "),
        merges.iter().map(|m| format!("\"{m}\"")).collect::<Vec<_>>().join(", ")
    );
    let header = (0..TENSORS)
        .map(|i| {
            format!(
                "\"t{i}\": {{\"dtype\": \"F32\", \"shape\": [1024], \"data_offsets\": [{}, {}]}}",
                i * 4096,
                (i + 1) * 4096
            )
        })
        .collect::<Vec<_>>()
        .join(", ");
    let header = format!("{{{header}}}");
    let mut safetensors = (header.len() as u64).to_le_bytes().to_vec();
    safetensors.extend_from_slice(header.as_bytes());
    payloads
        .iter()
        .for_each(|p| safetensors.extend_from_slice(p));
    vec![
        ("pytorch_model.bin", zipw::checkpoint(&pickle, &records)),
        ("model.safetensors", safetensors),
        ("tokenizer.json", tokenizer.into_bytes()),
        (
            "vocab.json",
            format!("{{{}}}", vocab.join(", ")).into_bytes(),
        ),
        (
            "merges.txt",
            format!("#version: 0.2\n{}\n", merges.join("\n")).into_bytes(),
        ),
        (
            "config.json",
            br#"{"architectures": ["GPT2LMHeadModel"], "n_embd": 768, "n_layer": 12}"#.to_vec(),
        ),
        (
            "generation_config.json",
            br#"{"bos_token_id": 50256, "eos_token_id": 50256}"#.to_vec(),
        ),
        (
            "README.md",
            b"---\nlicense: mit\n---\n# gpt2\n\nA model card.\n".to_vec(),
        ),
        (
            ".gitattributes",
            b"*.bin filter=lfs diff=lfs merge=lfs -text\n".to_vec(),
        ),
    ]
}

struct Inputs {
    pickle: Vec<u8>,
    archive: Arc<Source>,
    folder: Vec<(&'static str, Vec<u8>)>,
}

fn vm(inputs: &Inputs) -> usize {
    let limits = Limits::default();
    let user = UserGlobals::default();
    let mut hooks = TorchHooks::new(Refusals::Raise, &user, limits, IdFormat::Zip);
    let mut arena = Arena::new(&limits);
    let parsed = machine::run(
        &inputs.pickle,
        &mut hooks,
        &mut arena,
        &limits,
        StringEncoding::Utf8,
    );
    parsed.map(|_| arena.len()).unwrap_or(0)
}

fn archive_index(inputs: &Inputs) -> usize {
    let data = inputs.archive.bytes();
    let index = zip::read_index(data, Limits::default().max_zip_entries).expect("index");
    let layout = Layout::new(index, data).expect("layout");
    usize::from(layout.entry(records::DATA_PKL).is_some())
}

fn open(inputs: &Inputs) -> usize {
    let checkpoint = tensorplay::checkpoint::open(inputs.archive.clone(), &LoadOptions::default())
        .expect("open");
    checkpoint.storages.len()
}

fn unsafe_globals(inputs: &Inputs) -> usize {
    let options = ScanOptions::default();
    scan::unsafe_globals(inputs.archive.bytes(), &options)
        .expect("scan")
        .len()
}

/// Nothing beyond generating the inputs: what callgrind subtracts from the others.
fn setup(inputs: &Inputs) -> usize {
    inputs.pickle.len()
}

fn scan(inputs: &Inputs) -> usize {
    let options = ScanOptions::default();
    scan::scan_bytes(inputs.archive.bytes(), &options).pickles as usize
}

fn scan_pickles_only(inputs: &Inputs) -> usize {
    let options = ScanOptions {
        pickles_only: true,
        ..ScanOptions::default()
    };
    scan::scan_bytes(inputs.archive.bytes(), &options).pickles as usize
}

/// Every file of a model repository, each scanned whole by name, as a folder
/// scan reads them: the weights, and the text files read as pickles from byte 0.
fn scan_folder(inputs: &Inputs) -> usize {
    let options = ScanOptions::default();
    (inputs.folder.iter())
        .map(|(name, data)| scan::scan_file(data, None, &options, Some(name)).pickles as usize)
        .sum()
}

type Workload = fn(&Inputs) -> usize;

const WORKLOADS: [(&str, Workload); 8] = [
    ("setup", setup),
    ("vm", vm),
    ("archive_index", archive_index),
    ("open", open),
    ("unsafe_globals", unsafe_globals),
    ("scan", scan),
    ("scan_pickles_only", scan_pickles_only),
    ("scan_folder", scan_folder),
];

fn main() {
    let inputs = Inputs {
        pickle: state_dict_pickle(TENSORS),
        archive: Arc::new(Source::from_vec(checkpoint(TENSORS))),
        folder: model_folder(),
    };
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Some(pos) = args.iter().position(|a| a == "--once") {
        let name = args.get(pos + 1).map(String::as_str).unwrap_or("");
        let Some((_, work)) = WORKLOADS.iter().find(|(n, _)| *n == name) else {
            eprintln!("unknown workload {name:?}");
            std::process::exit(2);
        };
        black_box(work(&inputs));
        return;
    }
    // Filters after `cargo bench --bench core --` select workloads; `--bench` is cargo's.
    let filters: Vec<&String> = args.iter().filter(|a| !a.starts_with("--")).collect();
    for (name, work) in WORKLOADS.into_iter().skip(1) {
        if !filters.is_empty() && !filters.iter().any(|f| name.contains(f.as_str())) {
            continue;
        }
        let mut times: Vec<f64> = (0..15)
            .map(|_| {
                let start = Instant::now();
                black_box(work(&inputs));
                start.elapsed().as_secs_f64() * 1e3
            })
            .collect();
        times.sort_by(f64::total_cmp);
        println!(
            "{name:16} median {:8.2} ms   min {:8.2} ms   ({TENSORS} tensors)",
            times[times.len() / 2],
            times[0]
        );
    }
}
