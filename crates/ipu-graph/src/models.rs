//! The library of built-in, parameterised models.
//!
//! Every model is built through [`GraphBuilder`], so it is verified, and prints in the text
//! form. FP8 built-ins store their tensors at the scales [`FP8_SCALE_F143`] and
//! [`FP8_SCALE_F152`]; matmul and attention on FP8 operands accumulate in f16 and produce f16.

use crate::{DType, Graph, GraphBuilder, GraphError, OpKind, TensorType, UnaryFn, ValueId};

/// Scale of F143 tensors in the built-ins: F143's largest value 240 becomes 15, so the
/// reference inputs (magnitudes below 1) and layer-norm outputs (a few units) fit with headroom
/// while magnitudes down to 2^-14 remain normal numbers.
pub const FP8_SCALE_F143: i8 = -4;
/// Scale of F152 tensors in the built-ins: F152 already spans 2^-16..57344 at scale 0, wider
/// than any built-in needs.
pub const FP8_SCALE_F152: i8 = 0;
/// Largest value accepted for any size parameter; keeps graphs (and their reference
/// evaluation) within host memory.
pub const DIMENSION_MAX: usize = 1 << 16;

/// One parameter of a built-in model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParamInfo {
    /// Key for `--set key=value`.
    pub key: &'static str,
    /// Default value.
    pub default: &'static str,
    /// What it sets.
    pub help: &'static str,
}

/// A built-in model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModelInfo {
    /// Name for `ipu graph print NAME`.
    pub name: &'static str,
    /// What it computes.
    pub description: &'static str,
    /// Parameters with defaults.
    pub params: &'static [ParamInfo],
}

/// Why a model could not be built.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ModelError {
    /// No built-in of that name.
    #[error("unknown model `{name}` (known: {known})")]
    UnknownModel {
        /// The name asked for.
        name: String,
        /// The built-in names.
        known: String,
    },
    /// The model has no such parameter.
    #[error("model `{model}` has no parameter `{key}` (known: {known})")]
    UnknownParameter {
        /// Model name.
        model: String,
        /// The key given.
        key: String,
        /// The model's parameter keys.
        known: String,
    },
    /// A parameter value is malformed or out of range.
    #[error("model `{model}`: bad value `{value}` for `{key}`: {reason}")]
    BadValue {
        /// Model name.
        model: String,
        /// Parameter key.
        key: String,
        /// The value given.
        value: String,
        /// What is wrong.
        reason: String,
    },
    /// The parameters give an invalid graph. (Not a `source`: the message includes the
    /// verifier's, and an error chain would print it twice.)
    #[error("model `{model}`: {error}")]
    Graph {
        /// Model name.
        model: String,
        /// The verifier's error.
        error: GraphError,
    },
}

/// A parameter entry of [`MODELS`].
const fn param(key: &'static str, default: &'static str, help: &'static str) -> ParamInfo {
    ParamInfo { key, default, help }
}

const DTYPE: ParamInfo = param("dtype", "f16", "element type: f32, f16, f143 or f152");
const HEADS: ParamInfo = param("heads", "4", "attention heads");
const HEAD_DIM: ParamInfo = param("head_dim", "64", "dimension per head");
const CAUSAL: ParamInfo = param("causal", "false", "causal mask (true/false)");

const MODELS: &[ModelInfo] = &[
    ModelInfo {
        name: "matmul",
        description: "c = a[m,k] x b[k,n] (f32 partials; FP8 operands use f16 partials, f16 output)",
        params: &[
            param("m", "256", "rows of a"),
            param("k", "256", "inner dimension"),
            param("n", "256", "columns of b"),
            DTYPE,
            param(
                "partials",
                "auto",
                "accumulator type: f32, f16 (f16 or FP8 operands), or auto (f32 for f32 and f16 operands, f16 for FP8)",
            ),
        ],
    },
    ModelInfo {
        name: "mlp",
        description: "depth layers of h = matmul(x, w) / sqrt(width), then leaky ReLU max(h, 0.01 h), on x[batch,width]",
        params: &[
            param("batch", "64", "rows of x"),
            param("width", "256", "features per layer"),
            param("depth", "2", "number of layers"),
            DTYPE,
        ],
    },
    ModelInfo {
        name: "attention",
        description: "one attention operation on q,k,v[heads,seq,head_dim]",
        params: &[
            param("seq", "128", "sequence length"),
            HEADS,
            HEAD_DIM,
            DTYPE,
            CAUSAL,
        ],
    },
    ModelInfo {
        name: "attention-flash",
        description: "one fused flash_attention operation sized for the whole chip (f32 partials by default)",
        params: &[
            param("seq", "2048", "sequence length"),
            HEADS,
            HEAD_DIM,
            DTYPE,
            CAUSAL,
            param("block", "128", "query and key block size"),
            param(
                "kv_heads",
                "heads",
                "heads of k and v (grouped-query attention: a divisor of heads)",
            ),
            param(
                "mask",
                "none",
                "none; bool, f32 or f16: an input mask[seq, seq]; padded: the last `pad` keys \
                 hidden from every query by a constant bool mask[1, seq]",
            ),
            param("pad", "0", "keys hidden by mask=padded"),
            param(
                "partials",
                "auto",
                "scores and accumulator type: f32, f16 (f16 or FP8 inputs: scores on the AMP's \
                 f16 mode, softmax four keys at a time), or auto (f32 for f32 and f16 inputs, f16 \
                 for FP8)",
            ),
        ],
    },
    ModelInfo {
        name: "typed-attention-small-fp8",
        description: "F143 attention block with f16 partials, output projection, residual and \
                      layer norm (24 operations), sized for 64 tiles",
        params: &[param("seq", "128", "sequence length"), HEADS, HEAD_DIM],
    },
];

/// The built-in models.
pub fn list() -> &'static [ModelInfo] {
    MODELS
}

struct Params<'a> {
    info: &'a ModelInfo,
    given: &'a [(String, String)],
}

impl Params<'_> {
    fn raw(&self, key: &str) -> &str {
        self.given
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
            .or_else(|| {
                self.info
                    .params
                    .iter()
                    .find(|p| p.key == key)
                    .map(|p| p.default)
            })
            .expect("every key read by a builder is declared in MODELS")
    }

    fn bad(&self, key: &str, reason: impl Into<String>) -> ModelError {
        ModelError::BadValue {
            model: self.info.name.into(),
            key: key.into(),
            value: self.raw(key).into(),
            reason: reason.into(),
        }
    }

    fn size(&self, key: &str) -> Result<usize, ModelError> {
        match self.raw(key).parse::<usize>() {
            Ok(n) if (1..=DIMENSION_MAX).contains(&n) => Ok(n),
            _ => Err(self.bad(key, format!("expected an integer in 1..={DIMENSION_MAX}"))),
        }
    }

    fn bool(&self, key: &str) -> Result<bool, ModelError> {
        match self.raw(key) {
            "true" => Ok(true),
            "false" => Ok(false),
            _ => Err(self.bad(key, "expected true or false")),
        }
    }

    fn dtype(&self, key: &str) -> Result<DType, ModelError> {
        match self.raw(key) {
            "f32" => Ok(DType::F32),
            "f16" => Ok(DType::F16),
            "f143" => Ok(DType::F143 {
                scale: FP8_SCALE_F143,
            }),
            "f152" => Ok(DType::F152 {
                scale: FP8_SCALE_F152,
            }),
            _ => Err(self.bad(key, "expected f32, f16, f143 or f152")),
        }
    }
}

/// Partials and output dtype used by the built-ins for operands of `dtype`.
fn accumulation(dtype: DType) -> (DType, DType) {
    match dtype {
        DType::F32 => (DType::F32, DType::F32),
        DType::F16 => (DType::F32, DType::F16),
        _ => (DType::F16, DType::F16),
    }
}

/// Builds a built-in model; `params` are `(key, value)` pairs overriding the defaults (a later
/// pair wins).
pub fn build(name: &str, params: &[(String, String)]) -> Result<Graph, ModelError> {
    let Some(info) = MODELS.iter().find(|m| m.name == name) else {
        return Err(ModelError::UnknownModel {
            name: name.into(),
            known: MODELS.iter().map(|m| m.name).collect::<Vec<_>>().join(", "),
        });
    };
    for (key, _) in params {
        if !info.params.iter().any(|p| p.key == key) {
            return Err(ModelError::UnknownParameter {
                model: name.into(),
                key: key.clone(),
                known: info
                    .params
                    .iter()
                    .map(|p| p.key)
                    .collect::<Vec<_>>()
                    .join(", "),
            });
        }
    }
    let p = Params {
        info,
        given: params,
    };
    let graph = match name {
        "matmul" => matmul(&p),
        "mlp" => mlp(&p),
        "attention" => attention(&p, false),
        "attention-flash" => attention(&p, true),
        "typed-attention-small-fp8" => typed_attention_small_fp8(&p),
        _ => unreachable!("every name in MODELS has a builder"),
    }?;
    graph.map_err(|error| ModelError::Graph {
        model: name.into(),
        error,
    })
}

type Built = Result<Result<Graph, GraphError>, ModelError>;

fn matmul(p: &Params<'_>) -> Built {
    let (m, k, n, dtype) = (p.size("m")?, p.size("k")?, p.size("n")?, p.dtype("dtype")?);
    let (auto, out) = accumulation(dtype);
    let partials = match p.raw("partials") {
        "auto" => auto,
        "f32" => DType::F32,
        "f16" => DType::F16,
        _ => return Err(p.bad("partials", "expected f32, f16 or auto")),
    };
    Ok((|| {
        let mut b = GraphBuilder::new("matmul");
        let a = b.input("a", TensorType::new(dtype, [m, k]));
        let w = b.input("b", TensorType::new(dtype, [k, n]));
        let c = b.matmul("c", a, w, partials, out)?;
        b.output(c);
        b.finish()
    })())
}

fn mlp(p: &Params<'_>) -> Built {
    let (batch, width, depth, dtype) = (
        p.size("batch")?,
        p.size("width")?,
        p.size("depth")?,
        p.dtype("dtype")?,
    );
    if depth > 64 {
        return Err(p.bad("depth", "at most 64 layers"));
    }
    let (partials, out) = accumulation(dtype);
    Ok((|| {
        let mut b = GraphBuilder::new("mlp");
        let mut x = b.input("x", TensorType::new(dtype, [batch, width]));
        let weights: Vec<ValueId> = (0..depth)
            .map(|i| b.input(format!("w{i}"), TensorType::new(dtype, [width, width])))
            .collect();
        for (i, &w) in weights.iter().enumerate() {
            if b.ty(x).dtype != dtype {
                x = b.cast(&format!("x{i}"), x, dtype)?;
            }
            let h = b.matmul(&format!("h{i}"), x, w, partials, out)?;
            // Keeps activations of order 1 at any width, so FP8 casts between layers neither
            // saturate nor underflow.
            let factor = 1.0 / (width as f32).sqrt();
            let n = b.op(format!("n{i}"), OpKind::Scale { factor }, &[h])?;
            let leak = b.op(format!("leak{i}"), OpKind::Scale { factor: 0.01 }, &[n])?;
            x = b.op(format!("a{i}"), OpKind::Max, &[n, leak])?;
        }
        b.output(x);
        b.finish()
    })())
}

fn attention(p: &Params<'_>, flash: bool) -> Built {
    let (seq, heads, head_dim, dtype, causal) = (
        p.size("seq")?,
        p.size("heads")?,
        p.size("head_dim")?,
        p.dtype("dtype")?,
        p.bool("causal")?,
    );
    let (mut partials, out) = match (flash, dtype) {
        (true, DType::F16) => (DType::F32, DType::F16),
        _ => accumulation(dtype),
    };
    if flash {
        partials = match p.raw("partials") {
            "auto" => partials,
            "f32" => DType::F32,
            "f16" => DType::F16,
            _ => return Err(p.bad("partials", "expected f32, f16 or auto")),
        };
    }
    let scale = 1.0 / (head_dim as f32).sqrt();
    // Grouped-query attention and the mask (flash only).
    let (kv_heads, mask) = if flash {
        let kv_heads = match p.raw("kv_heads") {
            "heads" => heads,
            _ => p.size("kv_heads")?,
        };
        let mask = match p.raw("mask") {
            "none" => None,
            "bool" => Some((DType::Bool, false)),
            "f32" => Some((DType::F32, false)),
            "f16" => Some((DType::F16, false)),
            "padded" => Some((DType::Bool, true)),
            _ => return Err(p.bad("mask", "expected none, bool, f32, f16 or padded")),
        };
        let pad = match p.raw("pad").parse::<usize>() {
            Ok(n) if n < seq => n,
            _ => return Err(p.bad("pad", format!("expected an integer in 0..{seq}"))),
        };
        (kv_heads, mask.map(|(d, padded)| (d, padded.then_some(pad))))
    } else {
        (heads, None)
    };
    let kind = if flash {
        let block = p.size("block")?;
        OpKind::FlashAttention {
            scale,
            causal,
            block_q: block,
            block_k: block,
            partials,
            out,
        }
    } else {
        OpKind::Attention {
            scale,
            causal,
            partials,
            out,
        }
    };
    let name = if flash {
        "attention-flash"
    } else {
        "attention"
    };
    Ok((|| {
        let mut b = GraphBuilder::new(name);
        let ty = TensorType::new(dtype, [heads, seq, head_dim]);
        let kv_ty = TensorType::new(dtype, [kv_heads, seq, head_dim]);
        let q = b.input("q", ty);
        let k = b.input("k", kv_ty.clone());
        let v = b.input("v", kv_ty);
        let mut ins = vec![q, k, v];
        match mask {
            None => {}
            Some((d, None)) => ins.push(b.input("mask", TensorType::new(d, [seq, seq]))),
            Some((d, Some(pad))) => {
                let keep: Vec<f32> = (0..seq)
                    .map(|j| f32::from(u8::from(j < seq - pad)))
                    .collect();
                ins.push(b.constant_values("mask", TensorType::new(d, [1, seq]), &keep)?);
            }
        }
        let o = b.op("out", kind, &ins)?;
        b.output(o);
        b.finish()
    })())
}

fn typed_attention_small_fp8(p: &Params<'_>) -> Built {
    let (seq, heads, head_dim) = (p.size("seq")?, p.size("heads")?, p.size("head_dim")?);
    let width = heads * head_dim;
    if width > DIMENSION_MAX {
        return Err(p.bad(
            "heads",
            format!("heads * head_dim must be at most {DIMENSION_MAX}"),
        ));
    }
    let fp8 = DType::F143 {
        scale: FP8_SCALE_F143,
    };
    let f16 = DType::F16;
    Ok((|| {
        let mut b = GraphBuilder::new("typed-attention-small-fp8");
        let q8 = b.input("q", TensorType::new(fp8, [seq, width]));
        let k8 = b.input("k", TensorType::new(fp8, [seq, width]));
        let v8 = b.input("v", TensorType::new(fp8, [seq, width]));
        let wo8 = b.input("w_out", TensorType::new(fp8, [width, width]));
        let split = |b: &mut GraphBuilder, x8: ValueId, n: &str, perm: Vec<usize>| {
            let h = b.cast(&format!("{n}_f16"), x8, f16)?;
            let r = b.op(
                format!("{n}_heads"),
                OpKind::Reshape {
                    shape: vec![seq, heads, head_dim],
                },
                &[h],
            )?;
            let t = b.op(format!("{n}_t"), OpKind::Transpose { perm }, &[r])?;
            Ok::<_, GraphError>((h, t))
        };
        let (qh, qt) = split(&mut b, q8, "q", vec![1, 0, 2])?;
        let (_, kt) = split(&mut b, k8, "k", vec![1, 2, 0])?;
        let (_, vt) = split(&mut b, v8, "v", vec![1, 0, 2])?;
        let s = b.matmul("scores", qt, kt, f16, f16)?;
        let factor = 1.0 / (head_dim as f32).sqrt();
        let ss = b.op("scaled", OpKind::Scale { factor }, &[s])?;
        let m = b.op("row_max", OpKind::ReduceMax { axis: 2 }, &[ss])?;
        let d = b.op("shifted", OpKind::Sub, &[ss, m])?;
        let e = b.op("exps", OpKind::Unary(UnaryFn::Exp), &[d])?;
        let z = b.op("row_sum", OpKind::ReduceSum { axis: 2 }, &[e])?;
        let pr = b.op("probs", OpKind::Div, &[e, z])?;
        let o = b.matmul("context", pr, vt, f16, f16)?;
        let ot = b.op(
            "context_t",
            OpKind::Transpose {
                perm: vec![1, 0, 2],
            },
            &[o],
        )?;
        let of = b.op(
            "context_flat",
            OpKind::Reshape {
                shape: vec![seq, width],
            },
            &[ot],
        )?;
        let o8 = b.cast("context_fp8", of, fp8)?;
        let proj = b.matmul("projected", o8, wo8, f16, f16)?;
        let res = b.op("residual", OpKind::Add, &[proj, qh])?;
        let ln = b.op("normed", OpKind::LayerNorm { epsilon: 1e-5 }, &[res])?;
        let y = b.cast("y", ln, fp8)?;
        b.output(y);
        b.finish()
    })())
}
