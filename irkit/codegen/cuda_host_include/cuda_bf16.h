// cuda-host: the bf16 type is in irkit_cuda_host.h (force-included).
#pragma once
