//! Capture nodes: what a tool directory shows beyond its files. `output.json#<s>@<n>`
//! is exactly the page `litany tool read_tool_output` returns for that address (never
//! listed), and `stdout`/`stderr` are the whole decoded streams the pages slice.
//!
//! Guarantees: a page or stream is only ever computed from the `output.json` of the
//! record its name lies in, opened beneath the root; under `--agent ID`, records of other
//! agents refuse as `read_tool_output` does ([`PageError::confine`], the one home of that
//! boundary); a malformed address is `ENOENT` with the tool's own reason.

use std::ffi::OsStr;
use std::fs::File;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::Arc;

use super::node::Capture;
use super::{Child, Content, EAGER_STREAMS_BYTES, ErrorKind, Node, Tree, TreeError};
use super::{XATTR_BANNER, XATTR_LENGTH, XATTR_NEXT};
use crate::paging::address::OUTPUT_FILE;
use crate::paging::{Address, CaptureKey, Page, PageError, PageName, RecordPath, Stream};
use crate::workspace::backing::Stat;

/// The capture node `name` names in the tool directory of `record`, if it is a name the
/// paging layer answers: a stream file, or anything shaped like a page.
pub(super) fn child(
    parent: &Node,
    record: &RecordPath,
    name: &OsStr,
) -> Result<Option<Node>, TreeError> {
    let b = name.as_bytes();
    let shaped = Stream::ALL.iter().any(|s| s.as_str().as_bytes() == b)
        || (b.starts_with(OUTPUT_FILE.as_bytes()) && b.contains(&b'#'));
    if !shaped {
        return Ok(None);
    }
    let not_found = || TreeError::not_found(parent.join(name));
    let text = name.to_str().ok_or_else(not_found)?;
    let capture = if let Some(stream) = Stream::parse(text) {
        Capture::Stream {
            record: record.clone(),
            stream,
        }
    } else if let Some(page) = PageName::parse(text) {
        Capture::Page(page.within(record))
    } else {
        let full = format!("{}/{text}", record.dir());
        return Err(match Address::parse(&full) {
            Err(e) => TreeError::new(full, ErrorKind::Page(PageError::Malformed(e))),
            Ok(_) => not_found(),
        });
    };
    Ok(Some(Node::capture(capture)))
}

impl Tree {
    /// Whether the confinement lets `record` be paged.
    fn confine(&self, node: &Node, record: &RecordPath) -> Result<(), TreeError> {
        match &self.confined {
            Some(me) => PageError::confine(record, me).map_err(|e| {
                log::debug!("{}: {e}", node.path());
                TreeError::not_found(node.path())
            }),
            None => Ok(()),
        }
    }

    pub(super) fn capture_attr(&self, node: &Node, c: &Capture) -> Result<super::Attr, TreeError> {
        self.confine(node, c.record())?;
        let (size, st) = match c {
            Capture::Page(address) => {
                let (page, st) = self.page_of(node, address)?;
                (page.bytes.len() as u64, st)
            }
            Capture::Stream { record, stream } => {
                let (file, key, st) = self.record(record, node)?;
                (self.stream_len(node, &file, key, *stream)?, st)
            }
        };
        Ok(self.derived_attr(node, size, &st))
    }

    pub(super) fn capture_open(&self, node: &Node, c: &Capture) -> Result<Content, TreeError> {
        self.confine(node, c.record())?;
        match c {
            Capture::Page(address) => {
                let (page, _) = self.page_of(node, address)?;
                Ok(Content::Bytes(Arc::new(page.bytes.clone())))
            }
            Capture::Stream { record, stream } => {
                let (file, key, _) = self.record(record, node)?;
                self.stream_len(node, &file, key, *stream)?;
                Ok(Content::Stream {
                    file,
                    key,
                    stream: *stream,
                })
            }
        }
    }

    pub(super) fn capture_xattrs(
        &self,
        node: &Node,
        c: &Capture,
    ) -> Result<Vec<(String, Vec<u8>)>, TreeError> {
        self.confine(node, c.record())?;
        let mut out = Vec::new();
        match c {
            Capture::Page(address) => {
                let (page, _) = self.page_of(node, address)?;
                if let Some(next) = &page.next {
                    out.push((XATTR_NEXT.into(), next.to_string().into_bytes()));
                }
                out.push((
                    XATTR_BANNER.into(),
                    page.banner.trim_end_matches('\n').as_bytes().to_vec(),
                ));
                out.push((XATTR_LENGTH.into(), page.len.to_string().into_bytes()));
            }
            Capture::Stream { record, stream } => {
                let (file, key, _) = self.record(record, node)?;
                let len = self.stream_len(node, &file, key, *stream)?;
                out.push((XATTR_LENGTH.into(), len.to_string().into_bytes()));
            }
        }
        Ok(out)
    }

    /// The length of each stream of the `output.json` at `node`, as
    /// `user.litany.length.<stream>`; none when it does not parse.
    pub(super) fn output_xattrs(&self, node: &Node, record: &RecordPath) -> Vec<(String, Vec<u8>)> {
        let Ok((file, key, _)) = self.record(record, node) else {
            return Vec::new();
        };
        Stream::ALL
            .into_iter()
            .filter_map(|stream| {
                let len = self.pages.stream_len(&file, key, stream).ok()?;
                Some((
                    format!("{XATTR_LENGTH}.{stream}"),
                    len.to_string().into_bytes(),
                ))
            })
            .collect()
    }

    /// Adds the `stdout` and `stderr` files of `record` to a tool directory's listing,
    /// opening the record once for both, from the listing's own descriptor `dir`. A
    /// capture up to [`EAGER_STREAMS_BYTES`] is parsed for their sizes and gets none if
    /// it does not parse; a larger one that is not indexed yet is listed without reading
    /// it (a walk must not read every capture), with sizes found at the first lookup or
    /// stat.
    pub(super) fn push_streams(&self, out: &mut Vec<Child>, record: &RecordPath, dir: &OwnedFd) {
        let first = Node::capture(Capture::Stream {
            record: record.clone(),
            stream: Stream::Stdout,
        });
        if self.confine(&first, record).is_err() {
            return;
        }
        let (file, key, st) = match self.record_in(record, &first, Some(dir)) {
            Ok(r) => r,
            Err(e) => return log::debug!("{e}: its streams are not listed"),
        };
        let lazy = st.size > EAGER_STREAMS_BYTES && !self.pages.indexed(&key);
        for stream in Stream::ALL {
            let node = Node::capture(Capture::Stream {
                record: record.clone(),
                stream,
            });
            let len = if lazy {
                None
            } else {
                match self.pages.stream_len(&file, key, stream) {
                    Ok(len) => Some(len),
                    Err(e) => {
                        return log::debug!("{}: {e}: its streams are not listed", node.path());
                    }
                }
            };
            let attr = self.derived_attr(&node, len.unwrap_or(0), &st);
            let mut child = Child::new(stream.as_str(), node, attr);
            if len.is_none() {
                child.ttl = super::NO_TTL;
            }
            out.push(child);
        }
    }

    /// The `output.json` named by `record`, opened beneath the root, with its cache key.
    fn record(
        &self,
        record: &RecordPath,
        node: &Node,
    ) -> Result<(File, CaptureKey, Stat), TreeError> {
        self.record_in(record, node, None)
    }

    /// [`Self::record`], opened from `within` when given: its tool directory, already
    /// open for a listing.
    fn record_in(
        &self,
        record: &RecordPath,
        node: &Node,
        within: Option<&OwnedFd>,
    ) -> Result<(File, CaptureKey, Stat), TreeError> {
        let opened = match within {
            Some(dir) => self.backing.open_file_in(dir, OsStr::new(OUTPUT_FILE)),
            None => self.backing.open_file(Path::new(&record.to_string())),
        };
        let (file, st) = opened.map_err(|source| {
            let e = PageError::NoRecord {
                record: self.ws.root().join(record.to_string()),
                source,
            };
            TreeError::new(node.path(), ErrorKind::Page(e))
        })?;
        let key = CaptureKey::from_stat(&st);
        Ok((file, key, st))
    }

    fn stream_len(
        &self,
        node: &Node,
        file: &File,
        key: CaptureKey,
        stream: Stream,
    ) -> Result<u64, TreeError> {
        self.pages
            .stream_len(file, key, stream)
            .map_err(|e| self.page_error(node, e))
    }

    /// The page `address` names (see [`crate::paging::PageCache::recent_page`]).
    fn page_of(&self, node: &Node, address: &Address) -> Result<(Arc<Page>, Stat), TreeError> {
        let (file, key, st) = self.record(&address.record, node)?;
        let page = self
            .pages
            .recent_page(&file, key, address)
            .map_err(|e| self.page_error(node, e))?;
        Ok((page, st))
    }

    fn page_error(&self, node: &Node, e: PageError) -> TreeError {
        let e = match node {
            Node::Capture(c) => e.with_record(&self.ws.root().join(c.record().to_string())),
            _ => e,
        };
        TreeError::new(node.path(), ErrorKind::Page(e))
    }
}
