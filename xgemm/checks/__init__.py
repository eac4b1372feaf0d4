"""Every check a call makes, each before anything is compiled or launched:

- ``arguments``: what needs no GPU and no CuPy: the operands' shapes, dtypes and layouts,
  the output's dtype, the epilogue's arguments, which GPU a call's arrays share;
- ``arrays``: the output or C given and the bias, read through their framework;
- ``scales``: an 8-bit product's scales, and the factor they and alpha make;
- ``device``: what needs the GPU's properties: block limits, architecture, workspace;
- ``variants``: what a call names: tile parameters only with a named variant, the layout
  a named variant reads;
- ``grouped``: the grouped products' (``xgemm.grouped_matmul``).
"""

from .arguments import (
    AUTO,
    FP8_FORMATS,
    INT_MAX,
    PRECISIONS,
    TUNE,
    Layout,
    Meta,
    Shapes,
    check_dtypes,
    check_operands,
    check_precision,
    check_precision_for,
    check_scalar,
    dtype_name,
    extent,
    input_dtypes,
    layout_of,
    matmul_shapes,
    meta,
    on_gpu,
    one_device,
    output_dtype,
    overlaps,
    parse_activation,
)
from .arrays import check_bias, check_target, native, torch_formats
from .device import MAX_WORKSPACE_BYTES, check_arch, check_device_limits, check_workspace
from .scales import Scales, check_factor, check_scales, scaling, split_scales
from .variants import check_box_width, check_layout_read, check_params_named, whole_boxes

__all__ = [
    "AUTO", "FP8_FORMATS", "INT_MAX", "MAX_WORKSPACE_BYTES", "PRECISIONS", "TUNE", "Layout",
    "Meta", "Scales", "Shapes", "check_arch", "check_bias", "check_box_width",
    "check_device_limits",
    "check_dtypes", "check_factor", "check_layout_read", "check_operands",
    "check_params_named", "check_precision", "check_precision_for",
    "check_scalar", "check_scales", "check_target", "check_workspace", "dtype_name", "extent",
    "input_dtypes", "layout_of", "matmul_shapes", "meta", "native", "on_gpu", "one_device",
    "output_dtype", "overlaps", "parse_activation", "scaling", "split_scales",
    "torch_formats", "whole_boxes",
]
