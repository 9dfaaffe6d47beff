//! A GGUF reader (format versions 2 and 3): the header, every metadata key/value (arrays
//! included), the tensor directory, alignment and data offsets, plus decoding of the block
//! formats the importer needs (F32, F16, BF16, Q4_0, Q4_1, Q8_0).
//!
//! Every error names the file and what is wrong with it. Tensor data is read on demand with
//! seeks, so a reader holds only the header in memory.
//!
//! Layout reference (ggml's `docs/gguf.md`): little-endian; magic `GGUF`, u32 version, u64
//! tensor count, u64 metadata count; metadata entries (string key, u32 type, value); tensor
//! infos (string name, u32 n_dims, u64 dims[n_dims] innermost first, u32 ggml type, u64 offset
//! relative to the data section); padding to `general.alignment` (default 32); tensor data.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufReader, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

/// The four bytes every GGUF file starts with.
pub const GGUF_MAGIC: [u8; 4] = *b"GGUF";
/// Data alignment when `general.alignment` is absent.
pub const DEFAULT_ALIGNMENT: u64 = 32;

/// Strings and arrays longer than this are taken as corruption, not allocated.
const MAX_STRING_BYTES: u64 = 1 << 30;

/// One metadata value.
#[derive(Debug, Clone, PartialEq)]
pub enum GgufValue {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    F32(f32),
    Bool(bool),
    String(String),
    Array(Vec<GgufValue>),
    U64(u64),
    I64(i64),
    F64(f64),
}

impl GgufValue {
    /// The GGUF type code of this value.
    pub fn type_id(&self) -> u32 {
        match self {
            GgufValue::U8(_) => 0,
            GgufValue::I8(_) => 1,
            GgufValue::U16(_) => 2,
            GgufValue::I16(_) => 3,
            GgufValue::U32(_) => 4,
            GgufValue::I32(_) => 5,
            GgufValue::F32(_) => 6,
            GgufValue::Bool(_) => 7,
            GgufValue::String(_) => 8,
            GgufValue::Array(_) => 9,
            GgufValue::U64(_) => 10,
            GgufValue::I64(_) => 11,
            GgufValue::F64(_) => 12,
        }
    }

    /// Any integer value (signed or unsigned, any width) as i64; None for other kinds or a
    /// u64 beyond i64.
    pub fn as_i64(&self) -> Option<i64> {
        Some(match *self {
            GgufValue::U8(v) => v as i64,
            GgufValue::I8(v) => v as i64,
            GgufValue::U16(v) => v as i64,
            GgufValue::I16(v) => v as i64,
            GgufValue::U32(v) => v as i64,
            GgufValue::I32(v) => v as i64,
            GgufValue::U64(v) => i64::try_from(v).ok()?,
            GgufValue::I64(v) => v,
            _ => return None,
        })
    }

    /// Any numeric value as f64.
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            GgufValue::F32(v) => Some(v as f64),
            GgufValue::F64(v) => Some(v),
            _ => self.as_i64().map(|v| v as f64),
        }
    }

    pub fn as_bool(&self) -> Option<bool> {
        match *self {
            GgufValue::Bool(b) => Some(b),
            _ => None,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            GgufValue::String(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_array(&self) -> Option<&[GgufValue]> {
        match self {
            GgufValue::Array(a) => Some(a),
            _ => None,
        }
    }
}

/// ggml tensor types: every type whose storage size is known (so the directory of any common
/// GGUF can be checked), of which `F32, F16, BF16, Q4_0, Q4_1, Q8_0` can be decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum GgmlType {
    F32,
    F16,
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q8_0,
    Q8_1,
    Q2K,
    Q3K,
    Q4K,
    Q5K,
    Q6K,
    Q8K,
    I8,
    I16,
    I32,
    I64,
    F64,
    BF16,
    /// A type id this reader does not know (its storage size is unknown).
    Unknown(u32),
}

impl GgmlType {
    pub fn from_id(id: u32) -> Self {
        match id {
            0 => GgmlType::F32,
            1 => GgmlType::F16,
            2 => GgmlType::Q4_0,
            3 => GgmlType::Q4_1,
            6 => GgmlType::Q5_0,
            7 => GgmlType::Q5_1,
            8 => GgmlType::Q8_0,
            9 => GgmlType::Q8_1,
            10 => GgmlType::Q2K,
            11 => GgmlType::Q3K,
            12 => GgmlType::Q4K,
            13 => GgmlType::Q5K,
            14 => GgmlType::Q6K,
            15 => GgmlType::Q8K,
            24 => GgmlType::I8,
            25 => GgmlType::I16,
            26 => GgmlType::I32,
            27 => GgmlType::I64,
            28 => GgmlType::F64,
            30 => GgmlType::BF16,
            other => GgmlType::Unknown(other),
        }
    }

    pub fn id(self) -> u32 {
        match self {
            GgmlType::F32 => 0,
            GgmlType::F16 => 1,
            GgmlType::Q4_0 => 2,
            GgmlType::Q4_1 => 3,
            GgmlType::Q5_0 => 6,
            GgmlType::Q5_1 => 7,
            GgmlType::Q8_0 => 8,
            GgmlType::Q8_1 => 9,
            GgmlType::Q2K => 10,
            GgmlType::Q3K => 11,
            GgmlType::Q4K => 12,
            GgmlType::Q5K => 13,
            GgmlType::Q6K => 14,
            GgmlType::Q8K => 15,
            GgmlType::I8 => 24,
            GgmlType::I16 => 25,
            GgmlType::I32 => 26,
            GgmlType::I64 => 27,
            GgmlType::F64 => 28,
            GgmlType::BF16 => 30,
            GgmlType::Unknown(id) => id,
        }
    }

    /// ggml's name for the type.
    pub fn name(self) -> String {
        match self {
            GgmlType::Q2K => "Q2_K".into(),
            GgmlType::Q3K => "Q3_K".into(),
            GgmlType::Q4K => "Q4_K".into(),
            GgmlType::Q5K => "Q5_K".into(),
            GgmlType::Q6K => "Q6_K".into(),
            GgmlType::Q8K => "Q8_K".into(),
            GgmlType::Unknown(id) => format!("unknown type {id}"),
            other => format!("{other:?}"),
        }
    }

    /// (elements per block, bytes per block), when known.
    pub fn block(self) -> Option<(u64, u64)> {
        Some(match self {
            GgmlType::F32 => (1, 4),
            GgmlType::F16 => (1, 2),
            GgmlType::BF16 => (1, 2),
            GgmlType::Q4_0 => (32, 18),
            GgmlType::Q4_1 => (32, 20),
            GgmlType::Q5_0 => (32, 22),
            GgmlType::Q5_1 => (32, 24),
            GgmlType::Q8_0 => (32, 34),
            GgmlType::Q8_1 => (32, 36),
            GgmlType::Q2K => (256, 84),
            GgmlType::Q3K => (256, 110),
            GgmlType::Q4K => (256, 144),
            GgmlType::Q5K => (256, 176),
            GgmlType::Q6K => (256, 210),
            GgmlType::Q8K => (256, 292),
            GgmlType::I8 => (1, 1),
            GgmlType::I16 => (1, 2),
            GgmlType::I32 => (1, 4),
            GgmlType::I64 => (1, 8),
            GgmlType::F64 => (1, 8),
            GgmlType::Unknown(_) => return None,
        })
    }

    /// Whether [`dequantize`] can decode this type.
    pub fn is_decodable(self) -> bool {
        matches!(
            self,
            GgmlType::F32 | GgmlType::F16 | GgmlType::BF16 | GgmlType::Q4_0 | GgmlType::Q4_1 | GgmlType::Q8_0
        )
    }
}

/// One entry of the tensor directory.
#[derive(Debug, Clone)]
pub struct TensorInfo {
    pub name: String,
    /// ggml order: `dims[0]` is the innermost (contiguous) dimension. A 2-D weight of a
    /// PyTorch `[out, in]` matrix is stored as `[in, out]`.
    pub dims: Vec<u64>,
    pub ggml_type: GgmlType,
    /// Offset relative to the start of the data section.
    pub offset: u64,
    /// Bytes the tensor occupies.
    pub nbytes: u64,
}

impl TensorInfo {
    pub fn n_elements(&self) -> u64 {
        self.dims.iter().product()
    }

    /// The shape outermost first, as numpy/MLX/safetensors write it.
    pub fn shape(&self) -> Vec<u64> {
        self.dims.iter().rev().copied().collect()
    }
}

/// A parsed GGUF file: header, metadata and tensor directory (tensor data stays on disk).
#[derive(Debug, Clone)]
pub struct GgufFile {
    pub path: PathBuf,
    pub version: u32,
    pub alignment: u64,
    /// Metadata in file order.
    pub metadata: Vec<(String, GgufValue)>,
    pub tensors: Vec<TensorInfo>,
    /// Absolute offset of the data section.
    pub data_start: u64,
    pub file_len: u64,
}

/// A reader that knows how far it may go and names the file in every error.
struct HeaderReader<'a> {
    inner: BufReader<File>,
    pos: u64,
    len: u64,
    path: &'a Path,
}

impl HeaderReader<'_> {
    fn bytes(&mut self, n: u64, what: &dyn Fn() -> String) -> Result<Vec<u8>> {
        if n > self.len.saturating_sub(self.pos) {
            bail!(
                "{}: truncated GGUF file: {} needs {n} bytes at offset {}, but the file ends at {}",
                self.path.display(),
                what(),
                self.pos,
                self.len
            );
        }
        let mut buf = vec![0u8; n as usize];
        self.inner
            .read_exact(&mut buf)
            .with_context(|| format!("{}: read error at offset {} ({})", self.path.display(), self.pos, what()))?;
        self.pos += n;
        Ok(buf)
    }

    fn array<const N: usize>(&mut self, what: &dyn Fn() -> String) -> Result<[u8; N]> {
        let v = self.bytes(N as u64, what)?;
        Ok(v.try_into().unwrap())
    }

    fn u32(&mut self, what: &dyn Fn() -> String) -> Result<u32> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }

    fn u64(&mut self, what: &dyn Fn() -> String) -> Result<u64> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }

    fn string(&mut self, what: &dyn Fn() -> String) -> Result<String> {
        let n = self.u64(what)?;
        if n > MAX_STRING_BYTES {
            bail!(
                "{}: corrupt GGUF file: {} claims a {n}-byte string at offset {}",
                self.path.display(),
                what(),
                self.pos - 8
            );
        }
        let at = self.pos;
        let bytes = self.bytes(n, what)?;
        String::from_utf8(bytes).map_err(|_| {
            anyhow::anyhow!("{}: corrupt GGUF file: {} at offset {at} is not valid UTF-8", self.path.display(), what())
        })
    }

    fn value(&mut self, ty: u32, what: &dyn Fn() -> String, depth: u32) -> Result<GgufValue> {
        Ok(match ty {
            0 => GgufValue::U8(self.array::<1>(what)?[0]),
            1 => GgufValue::I8(self.array::<1>(what)?[0] as i8),
            2 => GgufValue::U16(u16::from_le_bytes(self.array(what)?)),
            3 => GgufValue::I16(i16::from_le_bytes(self.array(what)?)),
            4 => GgufValue::U32(self.u32(what)?),
            5 => GgufValue::I32(i32::from_le_bytes(self.array(what)?)),
            6 => GgufValue::F32(f32::from_le_bytes(self.array(what)?)),
            7 => {
                let b = self.array::<1>(what)?[0];
                if b > 1 {
                    bail!("{}: corrupt GGUF file: {} has bool byte {b} (must be 0 or 1)", self.path.display(), what());
                }
                GgufValue::Bool(b == 1)
            }
            8 => GgufValue::String(self.string(what)?),
            9 => {
                if depth > 0 {
                    // ggml's own reader refuses nested arrays too.
                    bail!("{}: unsupported GGUF metadata: {} is an array of arrays", self.path.display(), what());
                }
                let elem = self.u32(what)?;
                let n = self.u64(what)?;
                // Every element takes at least one byte, so a count beyond the file is corrupt.
                if n > self.len.saturating_sub(self.pos) {
                    bail!(
                        "{}: truncated GGUF file: {} claims {n} array elements at offset {}, but only {} bytes remain",
                        self.path.display(),
                        what(),
                        self.pos,
                        self.len.saturating_sub(self.pos)
                    );
                }
                let mut out = Vec::with_capacity(n as usize);
                for i in 0..n {
                    let w = || format!("{} element {i}", what());
                    out.push(self.value(elem, &w, depth + 1)?);
                }
                GgufValue::Array(out)
            }
            10 => GgufValue::U64(self.u64(what)?),
            11 => GgufValue::I64(i64::from_le_bytes(self.array(what)?)),
            12 => GgufValue::F64(f64::from_le_bytes(self.array(what)?)),
            other => bail!(
                "{}: corrupt or unsupported GGUF file: {} has value type {other} (known types are 0..=12)",
                self.path.display(),
                what()
            ),
        })
    }
}

impl GgufFile {
    /// Parse the header, metadata and tensor directory of `path`, checking that every tensor
    /// lies inside the file.
    pub fn open(path: &Path) -> Result<Self> {
        let file = File::open(path).with_context(|| format!("cannot open GGUF file {}", path.display()))?;
        let len = file.metadata().with_context(|| format!("cannot stat {}", path.display()))?.len();
        let mut r = HeaderReader { inner: BufReader::with_capacity(1 << 20, file), pos: 0, len, path };
        if len < 4 {
            bail!("{}: not a GGUF file (only {len} bytes, too short for the magic)", path.display());
        }
        let magic: [u8; 4] = r.array(&|| "the magic".into())?;
        if magic != GGUF_MAGIC {
            bail!(
                "{}: not a GGUF file (bad magic {:02x?}, \"{}\"; expected \"GGUF\")",
                path.display(),
                magic,
                String::from_utf8_lossy(&magic).escape_debug()
            );
        }
        let version = r.u32(&|| "the version".into())?;
        match version {
            2 | 3 => {}
            1 => bail!("{}: GGUF version 1 is not supported (only versions 2 and 3)", path.display()),
            v if v.swap_bytes() == 2 || v.swap_bytes() == 3 => bail!(
                "{}: big-endian GGUF (version {}) is not supported; only little-endian files are",
                path.display(),
                v.swap_bytes()
            ),
            v => bail!("{}: unsupported GGUF version {v} (only versions 2 and 3 are supported)", path.display()),
        }
        let n_tensors = r.u64(&|| "the tensor count".into())?;
        let n_kv = r.u64(&|| "the metadata count".into())?;
        // A key/value entry takes at least 8+4 bytes and a tensor info at least 8+4+4+8.
        if n_kv.saturating_mul(12).saturating_add(n_tensors.saturating_mul(24)) > len {
            bail!(
                "{}: truncated or corrupt GGUF file: the header claims {n_kv} metadata entries and {n_tensors} tensors, more than {len} bytes can hold",
                path.display()
            );
        }
        let mut metadata = Vec::with_capacity(n_kv as usize);
        for i in 0..n_kv {
            let key = r.string(&|| format!("metadata key {i}"))?;
            let what = || format!("metadata \"{key}\"");
            let ty = r.u32(&what)?;
            let value = r.value(ty, &what, 0)?;
            metadata.push((key, value));
        }
        let mut alignment = DEFAULT_ALIGNMENT;
        if let Some((_, v)) = metadata.iter().find(|(k, _)| k == "general.alignment") {
            let a = v.as_i64().unwrap_or(0);
            if a <= 0 || (a & (a - 1)) != 0 {
                bail!("{}: general.alignment is {v:?}, which is not a positive power of two", path.display());
            }
            alignment = a as u64;
        }
        let mut tensors = Vec::with_capacity(n_tensors as usize);
        for i in 0..n_tensors {
            let name = r.string(&|| format!("tensor info {i}"))?;
            let what = || format!("tensor \"{name}\"");
            let n_dims = r.u32(&what)?;
            if n_dims == 0 || n_dims > 4 {
                bail!(
                    "{}: corrupt GGUF file: tensor \"{name}\" has {n_dims} dimensions (1 to 4 allowed)",
                    path.display()
                );
            }
            let mut dims = Vec::with_capacity(n_dims as usize);
            for _ in 0..n_dims {
                dims.push(r.u64(&what)?);
            }
            let ggml_type = GgmlType::from_id(r.u32(&what)?);
            let offset = r.u64(&what)?;
            let n: u64 = dims.iter().try_fold(1u64, |acc, &d| acc.checked_mul(d)).with_context(|| {
                format!("{}: corrupt GGUF file: tensor \"{name}\" has dimensions {dims:?}, too large", path.display())
            })?;
            let Some((block, block_bytes)) = ggml_type.block() else {
                bail!(
                    "{}: tensor \"{name}\" has an unsupported ggml type ({}); its size is unknown",
                    path.display(),
                    ggml_type.name()
                );
            };
            if dims[0] % block != 0 {
                bail!(
                    "{}: corrupt GGUF file: tensor \"{name}\" ({}) has a row of {} elements, not a multiple of its block size {block}",
                    path.display(),
                    ggml_type.name(),
                    dims[0]
                );
            }
            if offset % alignment != 0 {
                bail!(
                    "{}: corrupt GGUF file: tensor \"{name}\" starts at data offset {offset}, not a multiple of the alignment {alignment}",
                    path.display()
                );
            }
            tensors.push(TensorInfo { name, dims, ggml_type, offset, nbytes: n / block * block_bytes });
        }
        let data_start = r.pos.div_ceil(alignment) * alignment;
        for t in &tensors {
            let end = data_start.checked_add(t.offset).and_then(|s| s.checked_add(t.nbytes));
            if end.is_none_or(|e| e > len) {
                bail!(
                    "{}: truncated GGUF file: tensor \"{}\" ({}, {:?}) needs bytes {}..{} but the file has {len} bytes",
                    path.display(),
                    t.name,
                    t.ggml_type.name(),
                    t.shape(),
                    data_start + t.offset,
                    data_start as u128 + t.offset as u128 + t.nbytes as u128
                );
            }
        }
        let mut seen = std::collections::HashSet::new();
        for t in &tensors {
            if !seen.insert(t.name.as_str()) {
                bail!("{}: corrupt GGUF file: tensor \"{}\" appears twice", path.display(), t.name);
            }
        }
        Ok(Self { path: path.to_path_buf(), version, alignment, metadata, tensors, data_start, file_len: len })
    }

    /// A metadata value by key.
    pub fn get(&self, key: &str) -> Option<&GgufValue> {
        self.metadata.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    /// A metadata value that must be present.
    pub fn require(&self, key: &str) -> Result<&GgufValue> {
        self.get(key).with_context(|| format!("{}: GGUF metadata \"{key}\" is missing", self.path.display()))
    }

    pub fn get_str(&self, key: &str) -> Option<&str> {
        self.get(key).and_then(GgufValue::as_str)
    }

    pub fn get_i64(&self, key: &str) -> Option<i64> {
        self.get(key).and_then(GgufValue::as_i64)
    }

    pub fn get_f64(&self, key: &str) -> Option<f64> {
        self.get(key).and_then(GgufValue::as_f64)
    }

    /// A required integer.
    pub fn require_i64(&self, key: &str) -> Result<i64> {
        let v = self.require(key)?;
        v.as_i64().with_context(|| format!("{}: GGUF metadata \"{key}\" is {v:?}, not an integer", self.path.display()))
    }

    /// A string array (e.g. `tokenizer.ggml.tokens`).
    pub fn get_str_array(&self, key: &str) -> Result<Option<Vec<&str>>> {
        let Some(v) = self.get(key) else { return Ok(None) };
        let arr = v
            .as_array()
            .with_context(|| format!("{}: GGUF metadata \"{key}\" is not an array", self.path.display()))?;
        arr.iter()
            .enumerate()
            .map(|(i, x)| {
                x.as_str().with_context(|| {
                    format!("{}: GGUF metadata \"{key}\" element {i} is {x:?}, not a string", self.path.display())
                })
            })
            .collect::<Result<Vec<_>>>()
            .map(Some)
    }

    /// An integer array (e.g. `tokenizer.ggml.token_type`).
    pub fn get_int_array(&self, key: &str) -> Result<Option<Vec<i64>>> {
        let Some(v) = self.get(key) else { return Ok(None) };
        let arr = v
            .as_array()
            .with_context(|| format!("{}: GGUF metadata \"{key}\" is not an array", self.path.display()))?;
        arr.iter()
            .enumerate()
            .map(|(i, x)| {
                x.as_i64().with_context(|| {
                    format!("{}: GGUF metadata \"{key}\" element {i} is {x:?}, not an integer", self.path.display())
                })
            })
            .collect::<Result<Vec<_>>>()
            .map(Some)
    }

    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.tensors.iter().find(|t| t.name == name)
    }

    /// The raw bytes of a tensor.
    pub fn tensor_bytes(&self, t: &TensorInfo) -> Result<Vec<u8>> {
        let mut f = File::open(&self.path).with_context(|| format!("cannot open GGUF file {}", self.path.display()))?;
        let start = self.data_start + t.offset;
        if start + t.nbytes > self.file_len {
            bail!("{}: truncated GGUF file: tensor \"{}\" runs past the end", self.path.display(), t.name);
        }
        f.seek(SeekFrom::Start(start))?;
        let mut buf = vec![0u8; t.nbytes as usize];
        f.read_exact(&mut buf).with_context(|| {
            format!(
                "{}: cannot read tensor \"{}\" ({} bytes at {start}): truncated?",
                self.path.display(),
                t.name,
                t.nbytes
            )
        })?;
        Ok(buf)
    }

    /// A tensor decoded to f32 values (ggml order, i.e. row-major over `shape()`).
    pub fn tensor_f32(&self, t: &TensorInfo) -> Result<Vec<f32>> {
        let bytes = self.tensor_bytes(t)?;
        dequantize(t.ggml_type, &bytes, t.n_elements() as usize)
            .with_context(|| format!("{}: tensor \"{}\"", self.path.display(), t.name))
    }

    /// The number of tensors of each type.
    pub fn type_counts(&self) -> BTreeMap<String, usize> {
        let mut out = BTreeMap::new();
        for t in &self.tensors {
            *out.entry(t.ggml_type.name()).or_insert(0) += 1;
        }
        out
    }
}

/// IEEE half (binary16) bits to f32, exactly.
pub fn f16_to_f32(h: u16) -> f32 {
    let sign = ((h >> 15) as u32) << 31;
    let exp = ((h >> 10) & 0x1f) as u32;
    let mant = (h & 0x3ff) as u32;
    let bits = if exp == 0 {
        if mant == 0 {
            sign
        } else {
            // Subnormal: mant * 2^-24 (exact in f32).
            let v = mant as f32 * f32::from_bits(0x3380_0000);
            return if sign != 0 { -v } else { v };
        }
    } else if exp == 0x1f {
        sign | 0x7f80_0000 | (mant << 13)
    } else {
        sign | ((exp + 127 - 15) << 23) | (mant << 13)
    };
    f32::from_bits(bits)
}

/// f32 to IEEE half bits, rounding to nearest even (overflow gives infinity).
pub fn f32_to_f16(x: f32) -> u16 {
    let bits = x.to_bits();
    let sign = ((bits >> 16) & 0x8000) as u16;
    let exp = ((bits >> 23) & 0xff) as i32;
    let mant = bits & 0x7f_ffff;
    if exp == 0xff {
        return sign | 0x7c00 | if mant != 0 { 0x200 } else { 0 };
    }
    let e = exp - 127 + 15;
    if e >= 0x1f {
        return sign | 0x7c00;
    }
    if e <= 0 {
        // Subnormal or zero in half precision.
        if e < -10 {
            return sign;
        }
        let m = mant | 0x80_0000;
        let shift = (14 - e) as u32;
        let half = 1u32 << (shift - 1);
        let rest = m & ((1u32 << shift) - 1);
        let mut r = m >> shift;
        if rest > half || (rest == half && (r & 1) == 1) {
            r += 1;
        }
        return sign | r as u16;
    }
    let mut r = ((e as u32) << 10) | (mant >> 13);
    let rest = mant & 0x1fff;
    if rest > 0x1000 || (rest == 0x1000 && (r & 1) == 1) {
        r += 1; // may carry into the exponent, which is still correct (up to infinity)
    }
    sign | r as u16
}

/// bfloat16 bits to f32.
pub fn bf16_to_f32(h: u16) -> f32 {
    f32::from_bits((h as u32) << 16)
}

/// Decode `n` elements of `ty` from `bytes` to f32 (the reference dequantization of ggml:
/// Q4_0 `d*(q-8)`, Q4_1 `d*q + m`, Q8_0 `d*q`).
pub fn dequantize(ty: GgmlType, bytes: &[u8], n: usize) -> Result<Vec<f32>> {
    let Some((block, block_bytes)) = ty.block() else { bail!("unsupported ggml type {}", ty.name()) };
    let (block, block_bytes) = (block as usize, block_bytes as usize);
    if !n.is_multiple_of(block) || bytes.len() != n / block * block_bytes {
        bail!("{} data of {} bytes does not hold {n} elements", ty.name(), bytes.len());
    }
    let mut out = Vec::with_capacity(n);
    let h = |b: &[u8], i: usize| f16_to_f32(u16::from_le_bytes([b[i], b[i + 1]]));
    match ty {
        GgmlType::F32 => out.extend(bytes.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap()))),
        GgmlType::F16 => out.extend(bytes.chunks_exact(2).map(|c| f16_to_f32(u16::from_le_bytes([c[0], c[1]])))),
        GgmlType::BF16 => out.extend(bytes.chunks_exact(2).map(|c| bf16_to_f32(u16::from_le_bytes([c[0], c[1]])))),
        GgmlType::Q4_0 | GgmlType::Q4_1 => {
            for b in bytes.chunks_exact(block_bytes) {
                let d = h(b, 0);
                let (m, qs) = if ty == GgmlType::Q4_1 { (h(b, 2), &b[4..20]) } else { (0.0, &b[2..18]) };
                let q = |j: usize| -> f32 {
                    let nib = if j < 16 { qs[j] & 0xf } else { qs[j - 16] >> 4 };
                    if ty == GgmlType::Q4_1 { nib as f32 } else { nib as f32 - 8.0 }
                };
                for j in 0..32 {
                    out.push(if ty == GgmlType::Q4_1 { d * q(j) + m } else { d * q(j) });
                }
            }
        }
        GgmlType::Q8_0 => {
            for b in bytes.chunks_exact(block_bytes) {
                let d = h(b, 0);
                out.extend(b[2..34].iter().map(|&q| d * (q as i8) as f32));
            }
        }
        other => bail!("decoding {} is not supported (only F32, F16, BF16, Q4_0, Q4_1, Q8_0)", other.name()),
    }
    Ok(out)
}
