//! `.npy` files in a scan. The header is read as numpy reads it
//! ([`crate::archive::npy`]): an object dtype, however spelled, means
//! `numpy.load(allow_pickle=True)` unpickles the rest of the file, which is then
//! scanned as the pickle it is; any other dtype holds no pickle. A header numpy
//! refuses runs nothing, but is no `.npy` either; one the model cannot settle
//! is never passed over.

use crate::archive::npy::{read_header, Outcome};
use crate::error::code;
use crate::scan::Scan;
use crate::torch::IdFormat;

impl Scan<'_> {
    pub(super) fn npy(&mut self, data: &[u8], location: &str, depth: u32) {
        let header = read_header(data);
        match header.outcome {
            Outcome::Object => {
                let body = header
                    .data_offset
                    .and_then(|at| data.get(at..))
                    .unwrap_or_default();
                self.stream(body, location, depth, IdFormat::Zip, None);
            }
            Outcome::Plain => {}
            Outcome::Refused(why) => self.problem(
                location,
                code::MALFORMED_ARCHIVE,
                format!("an .npy header numpy.load refuses: {why}"),
            ),
            Outcome::Unsure(why) => {
                // Never dropped with a speculative reading's problems: numpy
                // may unpickle what the scan did not read.
                self.stopped_short += 1;
                self.problem(
                    location,
                    code::MALFORMED_ARCHIVE,
                    format!(
                        "an .npy header numpy may read as an object array, which the scanner \
                         cannot settle: {why}"
                    ),
                );
            }
        }
    }
}
