//! `TarFile.next` and `TarInfo.fromtarfile` with its `_proc_*` methods, over a
//! model of `io.BytesIO`.

use super::header::{
    self, from_block, strip_trailing_slashes, HeaderError, Info, OldSparse, BLOCK,
};
use super::file::File;
use super::number::block;
use super::pax::{self, Headers, Key};
use super::{Archive, Failure, Member, PyException, Raise};

/// Headers one member may chain (GNU long names, PAX headers, each before the
/// next): each costs tarfile three Python frames of its 1000, so past this many
/// whether it hits its recursion limit depends on how deep its caller is.
const MAX_CHAIN: usize = 100;

/// A `TarFile` opened for reading.
struct TarFile<'d> {
    file: File<'d>,
    /// `TarFile.offset`: where the next header is expected.
    offset: i128,
    /// `TarFile.pax_headers`: what global PAX headers set, for every member after.
    globals: Headers,
}

impl<'d> TarFile<'d> {
    /// `tarfile.open`: the first call of `next()`, whose failure is `open`'s.
    fn open(data: &'d [u8]) -> Result<(TarFile<'d>, Option<Member>), Failure> {
        let mut tar = TarFile {
            file: File::new(data),
            offset: 0,
            globals: Headers::default(),
        };
        let first = tar.next().map_err(failure_of)?;
        Ok((tar, first))
    }
}

/// Whether `tarfile.open` succeeds.
pub fn open(data: &[u8]) -> Result<(), Failure> {
    TarFile::open(data).map(|_| ())
}

/// `tarfile.open` and `getmembers()`, up to `max_members` members.
pub fn read(data: &[u8], max_members: u64) -> Result<Archive, Failure> {
    let (mut tar, first) = TarFile::open(data)?;
    let mut members: Vec<Member> = first.into_iter().collect();
    let mut failure = None;
    while !members.is_empty() {
        match tar.next() {
            Ok(None) => break,
            Ok(Some(_)) if members.len() as u64 >= max_members => {
                failure = Some(Failure::Limit("more tar members than max_zip_entries"));
                break;
            }
            Ok(Some(member)) => members.push(member),
            Err(e) => {
                failure = Some(failure_of(e));
                break;
            }
        }
    }
    Ok(Archive { members, failure })
}

fn failure_of(raise: Raise) -> Failure {
    match raise {
        Raise::Header(HeaderError::Empty) => Failure::ReadError("empty file"),
        Raise::Header(HeaderError::Truncated) => Failure::ReadError("truncated header"),
        Raise::Header(HeaderError::EndOfFile) => Failure::ReadError("end of file header"),
        Raise::Header(HeaderError::Invalid) => Failure::ReadError("invalid header"),
        Raise::Subsequent => Failure::ReadError("a bad header after a GNU or PAX header"),
        Raise::EndOfData => Failure::ReadError("unexpected end of data"),
        Raise::Python(e) => Failure::Raises(e),
        Raise::Limit(why) => Failure::Limit(why),
    }
}

impl TarFile<'_> {
    /// `TarFile.next` (with `ignore_zeros` false): `None` at the end.
    fn next(&mut self) -> Result<Option<Member>, Raise> {
        if self.offset != i128::from(self.file.tell()) {
            if self.offset == 0 {
                return Ok(None);
            }
            self.file.seek(self.offset - 1)?;
            if self.file.read(1)?.is_empty() {
                return Err(Raise::EndOfData);
            }
        }
        match self.read_member(0) {
            Ok(info) => Ok(Some(Member {
                name: info.name,
                linkname: info.linkname,
                kind: info.kind,
                offset: info.offset,
                offset_data: info.offset_data,
                size: info.size,
                sparse: info.sparse,
            })),
            Err(Raise::Header(HeaderError::EndOfFile)) => Ok(None),
            // The header at the start decides whether the file is a tar at all;
            // past it, a bad header ends the archive without a word.
            Err(e @ Raise::Header(_)) if self.offset == 0 => Err(e),
            Err(Raise::Header(_)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// `TarInfo.fromtarfile`: the header at the file's position, and whatever
    /// headers it says follow.
    fn read_member(&mut self, depth: usize) -> Result<Info, Raise> {
        if depth > MAX_CHAIN {
            return Err(Raise::Limit(
                "a chain of more than 100 GNU or PAX headers: whether tarfile reaches \
                 Python's recursion limit depends on its caller",
            ));
        }
        let buf = self.file.read(BLOCK as i128)?;
        let mut info = from_block(buf)?;
        info.offset = self.file.tell().saturating_sub(BLOCK as u64);
        match info.kind {
            header::LONGNAME | header::LONGLINK => self.gnu_long(info, depth),
            header::SPARSE => self.old_gnu_sparse(info),
            header::PAX_EXTENDED | header::PAX_GLOBAL | header::SOLARIS_EXTENDED => {
                self.pax(info, depth)
            }
            _ => self.builtin(info),
        }
    }

    /// The header after a GNU or PAX header: any header error there is a
    /// `SubsequentHeaderError`, which always raises.
    fn subsequent(&mut self, depth: usize) -> Result<Info, Raise> {
        self.read_member(depth + 1).map_err(|e| match e {
            Raise::Header(_) | Raise::Subsequent => Raise::Subsequent,
            other => other,
        })
    }

    /// `_proc_builtin`: only a type with data skips its size in blocks; global
    /// PAX records apply after the skip is fixed.
    fn builtin(&mut self, mut info: Info) -> Result<Info, Raise> {
        info.offset_data = self.file.tell();
        let mut offset = i128::from(info.offset_data);
        if info.has_data() {
            offset += block(info.size);
        }
        self.offset = offset;
        apply_pax(&mut info, &self.globals)?;
        if info.is_dir() {
            strip_trailing_slashes(&mut info.name);
        }
        Ok(info)
    }

    /// `_proc_gnulong`: the blocks are the next member's name or link name, up
    /// to their first NUL.
    fn gnu_long(&mut self, info: Info, depth: usize) -> Result<Info, Raise> {
        let buf = self.file.read(block(info.size))?;
        let mut next = self.subsequent(depth)?;
        next.offset = info.offset;
        let text = super::number::until_nul(buf).to_vec();
        if info.kind == header::LONGNAME {
            next.name = text;
        } else {
            next.linkname = text;
        }
        if next.is_dir() && next.name.last() == Some(&b'/') {
            next.name.pop();
        }
        Ok(next)
    }

    /// `_proc_sparse`: an old GNU sparse member, its map continued in
    /// extension blocks; its size in blocks is skipped, its real size reported.
    fn old_gnu_sparse(&mut self, mut info: Info) -> Result<Info, Raise> {
        let OldSparse {
            map: mut structs,
            mut extended,
            real_size,
        } = info.old_sparse.take().unwrap_or_default();
        while extended {
            let buf = self.file.read(BLOCK as i128)?;
            for i in 0..21 {
                let at = 24 * i;
                let offset = short_block_number(buf, at)?;
                let numbytes = short_block_number(buf, at + 12)?;
                if offset != 0 && numbytes != 0 {
                    structs.push((offset, numbytes));
                }
            }
            extended = *buf.get(504).ok_or(Raise::Python(PyException::IndexError))? != 0;
        }
        info.sparse = Some(structs);
        info.offset_data = self.file.tell();
        self.offset = i128::from(info.offset_data) + block(info.size);
        info.size = real_size;
        Ok(info)
    }

    /// `_proc_pax`: the records of a PAX header, for the next member (`x`, `X`)
    /// or for every member after it (`g`).
    fn pax(&mut self, info: Info, depth: usize) -> Result<Info, Raise> {
        let buf = self.file.read(block(info.size))?;
        let global = info.kind == header::PAX_GLOBAL;
        let mut local = if global {
            None
        } else {
            Some(self.globals.clone())
        };
        pax::check_hdrcharset(buf)?;
        pax::parse_records(buf, local.as_mut().unwrap_or(&mut self.globals))?;
        let mut next = self.subsequent(depth)?;
        let headers = local.as_ref().unwrap_or(&self.globals);

        if let Some(map) = headers.get(Key::SparseMap) {
            next.sparse = Some(pax::sparse_map(map)?);
        } else if headers.get(Key::SparseSize).is_some() {
            next.sparse = Some(pax::sparse_records(buf)?);
        } else if headers.get(Key::SparseMajor) == Some(b"1")
            && headers.get(Key::SparseMinor) == Some(b"0")
        {
            next.sparse = Some(pax::sparse_blocks(&mut self.file)?);
            next.offset_data = self.file.tell();
        }

        if let Some(headers) = &local {
            apply_pax(&mut next, headers)?;
            next.offset = info.offset;
            if headers.get(Key::Size).is_some() {
                let mut offset = i128::from(next.offset_data);
                if next.has_data() {
                    offset += block(next.size);
                }
                self.offset = offset;
            }
        }
        Ok(next)
    }
}

/// `nti` of the 12 bytes at `at` of an extension block that may be short:
/// Python slices what is there, and `s[0]` of nothing is an IndexError.
fn short_block_number(buf: &[u8], at: usize) -> Result<i128, Raise> {
    let end = (at + 12).min(buf.len());
    let field = buf.get(at.min(end)..end).unwrap_or_default();
    if field.is_empty() {
        return Err(Raise::Python(PyException::IndexError));
    }
    super::number::nti(field).ok_or(Raise::Header(HeaderError::Invalid))
}

/// `TarInfo._apply_pax_info`, keyword by keyword in the order they were first
/// set: the last of `size`, `GNU.sparse.size` and `GNU.sparse.realsize` wins.
fn apply_pax(info: &mut Info, headers: &Headers) -> Result<(), Raise> {
    use super::number::int_str;
    for (key, value) in headers.iter() {
        match key {
            Key::SparseName => info.name = value.to_vec(),
            Key::SparseSize | Key::SparseRealSize => {
                info.size = int_str(value).ok_or(Raise::Python(PyException::ValueError))?;
            }
            Key::Path => {
                let mut name = value.to_vec();
                strip_trailing_slashes(&mut name);
                info.name = name;
            }
            Key::LinkPath => info.linkname = value.to_vec(),
            // A size int() refuses is 0.
            Key::Size => info.size = int_str(value).unwrap_or(0),
            Key::SparseMap | Key::SparseMajor | Key::SparseMinor => {}
        }
    }
    Ok(())
}
