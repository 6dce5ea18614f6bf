//! The gradient tensors a step allreduces: ResNet-50's parameters (the
//! default, from `resnet50.txt`), or `N` equal tensors.

/// ResNet-50's parameters, one `name shape` line each (`#` starts a comment).
const RESNET50: &str = include_str!("resnet50.txt");

/// One gradient tensor: the parameter it belongs to (also its tensor name, the
/// same on every step so that the response cache serves it) and its shape.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct TensorSpec {
    pub(crate) name: String,
    pub(crate) shape: Vec<usize>,
}

impl TensorSpec {
    pub(crate) fn elements(&self) -> usize {
        self.shape.iter().product()
    }
}

/// A line of a shape table that does not read as `name d1,d2,...`.
#[derive(Debug, thiserror::Error)]
#[error("line {line} of the shape table: {why}")]
pub(crate) struct TableError {
    line: usize,
    why: String,
}

/// Reads a shape table: one `name d1,d2,...` line per tensor, in layer order.
pub(crate) fn parse_table(text: &str) -> Result<Vec<TensorSpec>, TableError> {
    let mut out = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.split('#').next().unwrap_or_default().trim();
        if line.is_empty() {
            continue;
        }
        let bad = |why: String| TableError { line: i + 1, why };
        let mut fields = line.split_whitespace();
        let (Some(name), Some(dims), None) = (fields.next(), fields.next(), fields.next()) else {
            return Err(bad(format!("expected `name d1,d2,...`, found {line:?}")));
        };
        let shape = dims
            .split(',')
            .map(|d| match d.parse::<usize>() {
                Ok(n) if n > 0 => Ok(n),
                _ => Err(bad(format!("{d:?} is not a positive dimension"))),
            })
            .collect::<Result<Vec<_>, _>>()?;
        out.push(TensorSpec {
            name: name.to_owned(),
            shape,
        });
    }
    Ok(out)
}

/// ResNet-50's parameter tensors in layer order (torchvision's
/// `named_parameters()`): 161 tensors, 25,557,032 parameters.
pub(crate) fn resnet50() -> Result<Vec<TensorSpec>, TableError> {
    parse_table(RESNET50)
}

/// `count` one-dimensional tensors of `elements` elements each.
pub(crate) fn uniform(count: usize, elements: usize) -> Vec<TensorSpec> {
    (0..count)
        .map(|i| TensorSpec {
            name: format!("tensor.{i}"),
            shape: vec![elements],
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resnet50_has_161_tensors_and_25_557_032_parameters() {
        let specs = resnet50().unwrap();
        assert_eq!(specs.len(), 161);
        let params: usize = specs.iter().map(TensorSpec::elements).sum();
        assert_eq!(params, 25_557_032);
        assert_eq!(specs[0].name, "conv1.weight");
        assert_eq!(specs[0].shape, [64, 3, 7, 7]);
        assert_eq!(specs[159].name, "fc.weight");
        assert_eq!(specs[159].shape, [1000, 2048]);
        assert_eq!(specs[160].shape, [1000]);
    }

    #[test]
    fn resnet50_layers_are_conv_and_batch_norm_pairs() {
        let specs = resnet50().unwrap();
        let convs = specs.iter().filter(|s| s.shape.len() == 4).count();
        // The stem, 16 bottlenecks of three convolutions, 4 downsampling ones.
        assert_eq!(convs, 1 + 16 * 3 + 4);
        for (i, s) in specs.iter().enumerate().filter(|(_, s)| s.shape.len() == 4) {
            let (w, b) = (&specs[i + 1], &specs[i + 2]);
            assert!(w.name.ends_with(".weight") && b.name.ends_with(".bias"));
            assert_eq!(w.shape, [s.shape[0]], "batch norm after {}", s.name);
            assert_eq!(b.shape, [s.shape[0]], "batch norm after {}", s.name);
        }
        let names: std::collections::HashSet<_> = specs.iter().map(|s| &s.name).collect();
        assert_eq!(names.len(), specs.len(), "tensor names are unique");
    }

    #[test]
    fn tables_parse_with_comments_and_refuse_bad_lines() {
        let specs = parse_table("# header\n\na 2,3  # trailing\nb 4\n").unwrap();
        assert_eq!(specs.len(), 2);
        assert_eq!((specs[0].elements(), specs[1].elements()), (6, 4));
        for bad in ["a", "a 2,x", "a 0", "a 1 2"] {
            let err = parse_table(bad).unwrap_err();
            assert_eq!(err.line, 1, "{bad}: {err}");
        }
    }

    #[test]
    fn uniform_tensors_have_stable_distinct_names() {
        let specs = uniform(3, 4096);
        assert_eq!(specs.len(), 3);
        assert_eq!(specs[2].name, "tensor.2");
        assert!(specs.iter().all(|s| s.elements() == 4096));
    }
}
