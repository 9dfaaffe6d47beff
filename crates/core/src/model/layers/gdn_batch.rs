//! A batch of rows' Gated DeltaNet states, kept whole between steps.
//!
//! Every row owns its state, so a batched mixer call used to stack the rows' states
//! (`concatenate`) and hand each row a slice of the results. On MLX's CUDA backend a
//! concatenate of 8 rows launches a copy per row: 30 mixers x 2 states made 480 copy kernels a
//! B8 verify (1.4 ms of device time and several ms of the host's, docs/benchmarks.md). Each
//! row's state is now only where it sits in the batch's arrays ([`PackedAt`]). When the next
//! call's rows are that batch's rows in the same order, the mixer reads the batch's arrays
//! whole: as they are after a step; after a verify, at the position each row kept (a view when
//! every row kept the same one, one gather otherwise). Otherwise (a row joined or left) each
//! row's own part is sliced out then, and stacked. The values are the rows' own either way, so
//! the result is the same bit for bit.

use std::rc::Rc;

use anyhow::Result;
use mlx_rs::Array;

use crate::model::ops::{row, slice_axis};

/// The arrays one batched mixer call left for its rows.
pub struct Batch {
    /// After a step: the tails [B, K-1, C]. After a verify with capture: the convolution's
    /// whole input [B, K-1+T, C], whose rows p+1 .. p+K-1 are the tail after position p.
    conv: Array,
    /// After a step: the states [B, Hv, Dv, Dk]. With capture: [B, T, Hv, Dv, Dk].
    ssm: Array,
    rows: i32,
    /// The convolution's width K.
    kernel: i32,
}

impl Batch {
    /// Every row's tail [B, K-1, C] and state [B, Hv, Dv, Dk] after position `p` of a verify.
    fn at(&self, p: i32) -> Result<(Array, Array)> {
        let tail = slice_axis(&self.conv, 1, p + 1, p + self.kernel)?;
        let state = slice_axis(&self.ssm, 1, p, p + 1)?.squeeze_axes(&[1])?;
        Ok((tail, state))
    }
}

/// One row's Gated DeltaNet state for one layer: nothing before the row's first block, else
/// the row's place in the batch that made it ([`super::gdn_batch`]). A row holds no arrays of
/// its own: a cohort of eight rows would otherwise put 2 x 8 views a mixer into every step's
/// graph (480 of a B8 verify's nodes at the real geometry) only to hand each row its part, while
/// the next step of the same rows reads the batch whole. [`GdnState::conv`] and
/// [`GdnState::ssm`] make the row's views when a caller needs them.
#[derive(Default, Clone)]
pub struct GdnState {
    packed: Option<PackedAt>,
}

impl GdnState {
    fn in_batch(at: PackedAt) -> Self {
        GdnState { packed: Some(at) }
    }

    /// Where the row's state sits in the batch that made it; `None` before its first block.
    pub fn packed(&self) -> Option<&PackedAt> {
        self.packed.as_ref()
    }

    /// The last K-1 pre-convolution qkv rows, [1, K-1, conv_dim]; `None` before the first block.
    pub fn conv(&self) -> Result<Option<Array>> {
        self.packed.as_ref().map(|at| at.tail()).transpose()
    }

    /// The recurrent state, [1, Hv, Dv, Dk], float32; `None` before the first block.
    pub fn ssm(&self) -> Result<Option<Array>> {
        self.packed.as_ref().map(|at| at.state()).transpose()
    }

    /// The arrays to evaluate so the state holds no pending graph: its batch's, whole.
    pub fn arrays(&self) -> Vec<&Array> {
        self.packed.as_ref().map(|at| at.batch_arrays()).unwrap_or_default()
    }
}

/// A row's place in a [`Batch`]: its index, and after a verify the position it kept (`None`
/// for every row of a step's batch, `Some` for every row of a verify's).
#[derive(Clone)]
pub struct PackedAt {
    batch: Rc<Batch>,
    row: i32,
    position: Option<i32>,
}

impl PackedAt {
    /// The row's tail [1, K-1, C], as a view of the batch's arrays.
    pub fn tail(&self) -> Result<Array> {
        match self.position {
            None => row(&self.batch.conv, self.row),
            Some(p) => row(&slice_axis(&self.batch.conv, 1, p + 1, p + self.batch.kernel)?, self.row),
        }
    }

    /// The row's state [1, Hv, Dv, Dk], as a view of the batch's arrays.
    pub fn state(&self) -> Result<Array> {
        match self.position {
            None => row(&self.batch.ssm, self.row),
            Some(p) => Ok(row(&slice_axis(&self.batch.ssm, 1, p, p + 1)?, self.row)?.squeeze_axes(&[1])?),
        }
    }

    /// The batch's arrays, which hold every row's state.
    pub fn batch_arrays(&self) -> Vec<&Array> {
        vec![&self.batch.conv, &self.batch.ssm]
    }
}

/// Each row's state after a step: `tails` [B, K-1, C], `states` [B, Hv, Dv, Dk].
pub fn after_step(tails: &Array, states: &Array) -> Vec<GdnState> {
    let rows = states.shape()[0];
    let kernel = tails.shape()[1] + 1;
    let batch = Rc::new(Batch { conv: tails.clone(), ssm: states.clone(), rows, kernel });
    (0..rows).map(|i| GdnState::in_batch(PackedAt { batch: batch.clone(), row: i, position: None })).collect()
}

/// Each row's state after each position of a verify: `conv_in` [B, K-1+T, C] and
/// `per_position` [B, T, Hv, Dv, Dk]; the result is indexed [position][row].
pub fn after_verify(conv_in: &Array, per_position: &Array, kernel: i32) -> Vec<Vec<GdnState>> {
    let (rows, steps) = (per_position.shape()[0], per_position.shape()[1]);
    let batch = Rc::new(Batch { conv: conv_in.clone(), ssm: per_position.clone(), rows, kernel });
    (0..steps)
        .map(|p| {
            (0..rows)
                .map(|i| GdnState::in_batch(PackedAt { batch: batch.clone(), row: i, position: Some(p) }))
                .collect()
        })
        .collect()
}

/// The rows' tails [B, K-1, C] and states [B, Hv, Dv, Dk] read whole from the batch they all
/// come from, in order; `None` when they do not (then the caller stacks them row by row).
pub fn whole(states: &[&mut GdnState]) -> Result<Option<(Array, Array)>> {
    let Some((batch, kept)) = same_batch(states) else {
        return Ok(None);
    };
    // A step's batch holds no positions: its arrays are the rows' states as they are.
    if kept.is_empty() {
        return Ok(Some((batch.conv.clone(), batch.ssm.clone())));
    }
    if kept.iter().all(|&p| p == kept[0]) {
        return batch.at(kept[0]).map(Some);
    }
    // Rows kept different positions: one gather per array picks each row's.
    let rows = batch.rows;
    let taps = batch.kernel - 1;
    let tail_rows: Vec<i32> = kept.iter().flat_map(|&p| (0..taps).map(move |j| p + 1 + j)).collect();
    let tail = batch.conv.take_along_axis(Array::from_slice(&tail_rows, &[rows, taps, 1]), 1)?;
    let state = batch.ssm.take_along_axis(Array::from_slice(&kept, &[rows, 1, 1, 1, 1]), 1)?.squeeze_axes(&[1])?;
    Ok(Some((tail, state)))
}

/// The batch every row comes from, in order, and the positions they kept (none after a step);
/// `None` when they do not all come from one.
fn same_batch(states: &[&mut GdnState]) -> Option<(Rc<Batch>, Vec<i32>)> {
    if !crate::model::routes::current().gdn_batch {
        return None;
    }
    let batch = states.first().and_then(|s| s.packed())?.batch.clone();
    if batch.rows != states.len() as i32 {
        return None;
    }
    let mut kept = Vec::with_capacity(states.len());
    for (i, s) in states.iter().enumerate() {
        match s.packed() {
            Some(at) if Rc::ptr_eq(&at.batch, &batch) && at.row == i as i32 => kept.extend(at.position),
            _ => return None,
        }
    }
    Some((batch, kept))
}

/// A verify's arrays as it left them, and each row's place in them: what the fused front reads
/// in place ([`crate::model::cuda::gdn_kernel::FusedInputs::place`]) rather than the strided
/// slices [`whole`] makes, which MLX copies to contiguous arrays before a custom kernel's launch
/// (16.8 MB a layer at a B8 verify at the real geometry).
pub struct Placed {
    /// The verify's convolution input [B, K-1+T, C].
    pub conv: Array,
    /// Its states after every position [B, T, Hv, Dv, Dk].
    pub ssm: Array,
    /// [B, 2] int32: the position each row kept, and the row in `conv` where its tail starts.
    pub place: Array,
}

/// The rows' tails and states left where a verify put them, when every row is that verify's,
/// in order; `None` otherwise (a step's batch is already read whole as it is).
pub fn placed(states: &[&mut GdnState]) -> Option<Placed> {
    let (batch, kept) = same_batch(states)?;
    if kept.is_empty() {
        return None;
    }
    let place: Vec<i32> = kept.iter().flat_map(|&p| [p, p + 1]).collect();
    Some(Placed {
        conv: batch.conv.clone(),
        ssm: batch.ssm.clone(),
        place: Array::from_slice(&place, &[batch.rows, 2]),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ops::gather_rows;

    fn host(a: &Array) -> Vec<f32> {
        crate::model::ops::host_f32(a).unwrap()
    }

    /// What the rows' own arrays give stacked one by one (the route `whole` replaces).
    fn stacked(states: &[&mut GdnState]) -> (Vec<f32>, Vec<f32>) {
        let tails: Vec<Option<Array>> = states.iter().map(|s| s.conv().unwrap()).collect();
        let ssms: Vec<Option<Array>> = states.iter().map(|s| s.ssm().unwrap()).collect();
        let (t, s) = (
            gather_rows(&tails, &[1], mlx_rs::Dtype::Float32).unwrap(),
            gather_rows(&ssms, &[1], mlx_rs::Dtype::Float32).unwrap(),
        );
        (host(&t), host(&s))
    }

    fn check(states: &mut [GdnState], expect_whole: bool) {
        let refs: Vec<&mut GdnState> = states.iter_mut().collect();
        let got = whole(&refs).unwrap();
        assert_eq!(got.is_some(), expect_whole);
        if let Some((tail, state)) = got {
            let (want_tail, want_state) = stacked(&refs);
            assert_eq!(host(&tail), want_tail, "tails");
            assert_eq!(host(&state), want_state, "states");
        }
    }

    #[test]
    fn a_batch_is_read_whole_only_by_its_own_rows_in_order() {
        let (rows, taps, c) = (3, 3, 5);
        let tails = mlx_rs::random::uniform::<_, f32>(-1.0, 1.0, &[rows, taps, c], None).unwrap();
        let ssm = mlx_rs::random::uniform::<_, f32>(-1.0, 1.0, &[rows, 2, 4, 4], None).unwrap();
        let mut states = after_step(&tails, &ssm);
        check(&mut states, true);
        // Each row's own part is its row of the batch.
        let (conv, state) = (states[1].conv().unwrap().unwrap(), states[1].ssm().unwrap().unwrap());
        assert_eq!(host(&conv), host(&row(&tails, 1).unwrap()));
        assert_eq!(host(&state), host(&row(&ssm, 1).unwrap()));
        // Another order, a subset, or a row without state: stacked row by row.
        states.swap(0, 1);
        check(&mut states, false);
        states.swap(0, 1);
        check(&mut states[..2], false);
        states[2] = GdnState::default();
        check(&mut states, false);
    }

    #[test]
    fn after_a_verify_each_row_reads_the_position_it_kept() {
        let (rows, steps, kernel, c) = (4, 2, 4, 3);
        let conv_in = mlx_rs::random::uniform::<_, f32>(-1.0, 1.0, &[rows, kernel - 1 + steps, c], None).unwrap();
        let per_position = mlx_rs::random::uniform::<_, f32>(-1.0, 1.0, &[rows, steps, 2, 3, 3], None).unwrap();
        let captured = after_verify(&conv_in, &per_position, kernel);
        assert_eq!((captured.len(), captured[0].len()), (steps as usize, rows as usize));
        // Row 2's own part after position 0: the tail rows 1 .. K-1 of its convolution input, and
        // its state after that position.
        let (conv, state) = (captured[0][2].conv().unwrap().unwrap(), captured[0][2].ssm().unwrap().unwrap());
        let want_tail = slice_axis(&row(&conv_in, 2).unwrap(), 1, 1, kernel).unwrap();
        let want_state = slice_axis(&row(&per_position, 2).unwrap(), 1, 0, 1).unwrap();
        assert_eq!(host(&conv), host(&want_tail));
        assert_eq!(host(&state), host(&want_state));
        // Every row at the last position, every row at the first, and mixed.
        for kept in [[1, 1, 1, 1], [0, 0, 0, 0], [1, 0, 0, 1], [0, 1, 1, 1]] {
            let mut states: Vec<GdnState> = kept.iter().enumerate().map(|(b, &p)| captured[p][b].clone()).collect();
            check(&mut states, true);
        }
        // Read at their places, the verify's arrays give each row what `whole` gives it.
        for kept in [[1, 1, 1, 1], [1, 0, 0, 1]] {
            let mut states: Vec<GdnState> = kept.iter().enumerate().map(|(b, &p)| captured[p][b].clone()).collect();
            let refs: Vec<&mut GdnState> = states.iter_mut().collect();
            let (want_tail, want_state) = whole(&refs).unwrap().unwrap();
            let p = placed(&refs).unwrap();
            let place: Vec<i32> =
                crate::model::ops::host_u32(&p.place).unwrap().into_iter().map(|v| v as i32).collect();
            let (mut tails, mut ssms) = (Vec::new(), Vec::new());
            for b in 0..rows {
                let (pos, at) = (place[2 * b as usize], place[2 * b as usize + 1]);
                tails.push(slice_axis(&row(&p.conv, b).unwrap(), 1, at, at + kernel - 1).unwrap());
                ssms.push(slice_axis(&row(&p.ssm, b).unwrap(), 1, pos, pos + 1).unwrap().squeeze_axes(&[1]).unwrap());
            }
            let tail = mlx_rs::ops::concatenate(&tails, 0).unwrap();
            let state = mlx_rs::ops::concatenate(&ssms, 0).unwrap();
            assert_eq!(host(&tail), host(&want_tail), "tails at {kept:?}");
            assert_eq!(host(&state), host(&want_state), "states at {kept:?}");
        }
        // A step's batch has no places: it is read whole as it is.
        let mut step = after_step(
            &mlx_rs::ops::zeros::<f32>(&[rows, kernel - 1, c]).unwrap(),
            &mlx_rs::ops::zeros::<f32>(&[rows, 2, 3, 3]).unwrap(),
        );
        assert!(placed(&step.iter_mut().collect::<Vec<_>>()).is_none());
        // Rows of a step batch mixed with the verify's: stacked row by row.
        let mut states: Vec<GdnState> = (0..rows as usize).map(|b| captured[1][b].clone()).collect();
        let other = after_step(
            &mlx_rs::ops::zeros::<f32>(&[rows, kernel - 1, c]).unwrap(),
            &mlx_rs::ops::zeros::<f32>(&[rows, 2, 3, 3]).unwrap(),
        );
        states[3] = other[3].clone();
        check(&mut states, false);
    }
}
