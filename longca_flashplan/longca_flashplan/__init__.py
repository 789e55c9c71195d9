"""Running a static mask through FlashAttention-style kernels, whatever the library.

`plan` turns slices into calls such a kernel takes (varlen segments with a bottom-right
`window_size`), `executor` runs them through an adapter's lse-returning forward and backward
(merging by lse where calls share rows), `kernel` builds a KernelSpec's prepare/run/supports on
top, and `family` the whole KernelSpec of a FlashAttention-family library (`FlashAdapter`,
`flash_kernel`: fa2, fa3, fa4). Shared by the fa2, fa3, fa4 and cudnn plugins; imports no kernel
library itself.
"""
