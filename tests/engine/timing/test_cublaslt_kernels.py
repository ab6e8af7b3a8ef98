"""engine.timing.cublaslt_kernels: cuBLASLt's algorithm attributes named with the enumerations of
the cublasLt.h the shim is built against, in our orientation (row-major C, M rows)."""

from __future__ import annotations

import pytest

from engine.timing.cublaslt_kernels import CONFIG_ATTRIBUTES, describe, load_enums, parse_enums

# The shape of cublasLt.h's enumerations (values as in cuBLAS 13.1), comments included: a
# comment's "default: 0" must not be read as a member.
HEADER = """
/** Tile size (in C/D matrix Rows x Cols)
 *
 * General order of tile IDs is sorted by size first and by first dimension second.
 */
typedef enum {
  CUBLASLT_MATMUL_TILE_UNDEFINED = 0,
  CUBLASLT_MATMUL_TILE_64x64 = 15,
  CUBLASLT_MATMUL_TILE_128x128 = 20,
  CUBLASLT_MATMUL_TILE_128x256 = 23,  /* two consumer warpgroups */
  CUBLASLT_MATMUL_TILE_256x128 = 24,
  CUBLASLT_MATMUL_TILE_END
} cublasLtMatmulTile_t;

typedef enum {
  CUBLASLT_MATMUL_STAGES_UNDEFINED = 0,
  CUBLASLT_MATMUL_STAGES_64x4 = 16,
  CUBLASLT_MATMUL_STAGES_64xAUTO = 35,
  CUBLASLT_MATMUL_STAGES_END
} cublasLtMatmulStages_t;

typedef enum {
  /** Let library pick cluster shape automatically; default: 0 */
  CUBLASLT_CLUSTER_SHAPE_AUTO = 0,
  CUBLASLT_CLUSTER_SHAPE_1x1x1 = 2,
  CUBLASLT_CLUSTER_SHAPE_2x1x1 = 3,
  CUBLASLT_CLUSTER_SHAPE_1x2x1 = 5,
  CUBLASLT_CLUSTER_SHAPE_END
} cublasLtClusterShape_t;

typedef enum {
  CUBLASLT_MATMUL_INNER_SHAPE_UNDEFINED = 0,
  CUBLASLT_MATMUL_INNER_SHAPE_MMA16816 = 4,
  CUBLASLT_MATMUL_INNER_SHAPE_END
} cublasLtMatmulInnerShape_t;

typedef enum {
  CUBLASLT_REDUCTION_SCHEME_NONE = 0,
  CUBLASLT_REDUCTION_SCHEME_MASK = 0x7,
} cublasLtReductionScheme_t;
"""


def raw(**values: int) -> list[int]:
    """The shim's attribute values, -1 (not reported) where not given."""
    return [values.get(name, -1) for name in CONFIG_ATTRIBUTES]


def test_it_reads_tiles_stages_clusters_and_inner_shapes_from_the_header():
    enums = parse_enums(HEADER)
    assert enums.tiles == {15: (64, 64), 20: (128, 128), 23: (128, 256), 24: (256, 128)}
    assert enums.stages == {16: (64, 4), 35: (64, None)}
    assert enums.clusters == {0: None, 2: (1, 1, 1), 3: (2, 1, 1), 5: (1, 2, 1)}
    assert enums.inner_shapes == {0: "undefined", 4: "mma16816"}


def test_cublaslt_rows_are_our_n_and_its_columns_our_m():
    """The shim runs C = A·B as Cᵀ = Bᵀ·Aᵀ: cuBLASLt's 128x256 tile and 2x1x1 cluster are our
    256x128 tile and 1x2 cluster."""
    kernel = describe(
        raw(
            algo_id=66,
            tile_id=23,
            splitk=1,
            reduction_scheme=0,
            swizzle=0,
            custom_option=0,
            stages_id=16,
            inner_shape_id=0,
            cluster_shape_id=3,
        ),
        parse_enums(HEADER),
    )
    assert (kernel.tile_m, kernel.tile_n, kernel.tile_k, kernel.stages) == (256, 128, 64, 4)
    assert (kernel.cluster_m, kernel.cluster_n) == (1, 2)
    assert kernel.label == "algo66 256x128x64 c1x2 s4"


def test_stages_and_clusters_cublaslt_chooses_itself_are_left_open():
    kernel = describe(
        raw(algo_id=1, tile_id=20, stages_id=35, cluster_shape_id=0), parse_enums(HEADER)
    )
    assert kernel.stages is None
    assert kernel.tile_k == 64
    assert kernel.cluster_m is None
    assert kernel.cluster_n is None
    assert kernel.label == "algo1 128x128x64 s?"


def test_split_k_and_swizzling_are_named_in_the_label():
    kernel = describe(
        raw(
            algo_id=21,
            tile_id=15,
            splitk=8,
            reduction_scheme=2,
            swizzle=1,
            stages_id=16,
            cluster_shape_id=2,
        ),
        parse_enums(HEADER),
    )
    assert (kernel.splitk, kernel.reduction, kernel.swizzle) == (8, "compute_type", 1)
    assert kernel.label == "algo21 64x64x64 c1x1 s4 splitk8_compute_type swizzle1"


def test_ids_the_header_does_not_name_stay_raw_rather_than_guessed():
    values = raw(algo_id=7, tile_id=999, stages_id=999, cluster_shape_id=999)
    kernel = describe(values, parse_enums(HEADER))
    assert kernel.tile_mnk == (None, None, None)
    assert kernel.raw["tile_id"] == 999
    assert kernel.to_dict()["label"] == "algo7 ?x?x? s?"
    without_header = describe(values, None)
    assert without_header.tile_m is None
    assert without_header.raw == kernel.raw


def test_a_missing_header_gives_no_enumerations(tmp_path):
    assert load_enums(tmp_path) is None
    (tmp_path / "cublasLt.h").write_text(HEADER)
    assert load_enums(tmp_path).tiles[23] == (128, 256)


@pytest.mark.parametrize("attribute", CONFIG_ATTRIBUTES)
def test_every_attribute_the_shim_reads_is_kept_raw(attribute):
    values = raw(**{attribute: 3})
    assert describe(values, parse_enums(HEADER)).raw[attribute] == 3
