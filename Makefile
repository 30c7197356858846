# train_llama_fp8: build the trainer, the GPU test, the CPU test suite and the dev/cuda programs.
#   make                   trainer (train_llama_fp8)
#   make test              CPU test suite; then the GPU tests too when a GPU is present
#   make venv              .venv/, the Python environment of requirements.txt and llama_fp8 (make test makes it too)
#   make test_llama_fp8    GPU test program
#   make dev               every dev/cuda microbenchmark
# Optional libraries (cuDNN, NCCL, MPI) are found by compiling and linking a tiny program against
# each; what was found is printed, and a missing one is left out with a message saying what it costs.
# Override the GPU architecture with GPU_ARCH=sm_XX (default sm_90, Hopper; fp8 GEMMs need sm_89+).

NVCC ?= nvcc
CC ?= gcc
GPU_ARCH ?= sm_90
CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(shell command -v $(NVCC) 2>/dev/null))

NVCC_FLAGS = -O3 -arch=$(GPU_ARCH) -std=c++17 --use_fast_math -Xcompiler -Wall -Xcompiler -Wno-unused-function -Xcompiler -fopenmp -I.
NVCC_LDLIBS = -lcublasLt -lcublas -lgomp -lz
CPU_CFLAGS = -O2 -Wall -Wno-unused-function -I.

ifeq ($(CUDA_HOME),)
$(error nvcc not found: install the CUDA toolkit (12.4 or newer) or set NVCC=/path/to/nvcc)
endif

# probe LIB HEADER FUNCTION-CALL INCLUDE-DIRS LIB-DIRS: prints the flags that work, or nothing.
define probe
$(shell for inc in $(4); do for lib in $(5); do \
  printf '#include <%s>\nint main(void){ %s; return 0; }\n' '$(2)' '$(3)' > /tmp/probe_$$$$.cu; \
  if $(NVCC) -arch=$(GPU_ARCH) -I$$inc -L$$lib /tmp/probe_$$$$.cu -l$(1) -o /tmp/probe_$$$$ >/dev/null 2>&1; then \
    echo "-I$$inc -L$$lib -Xlinker -rpath=$$lib"; rm -f /tmp/probe_$$$$ /tmp/probe_$$$$.cu; exit 0; fi; \
  done; done; rm -f /tmp/probe_$$$$ /tmp/probe_$$$$.cu)
endef

INC_DIRS = $(CUDA_HOME)/include /usr/include/x86_64-linux-gnu /usr/include /usr/local/include
LIB_DIRS = $(CUDA_HOME)/lib64 /usr/lib/x86_64-linux-gnu /usr/lib64 /usr/local/lib

ifneq ($(NO_CUDNN),1)
CUDNN_FLAGS := $(call probe,cudnn,cudnn.h,cudnnGetVersion(),$(INC_DIRS),$(LIB_DIRS))
endif
ifneq ($(NO_NCCL),1)
NCCL_FLAGS := $(call probe,nccl,nccl.h,int v; ncclGetVersion(&v),$(INC_DIRS),$(LIB_DIRS))
endif
ifneq ($(NO_MPI),1)
MPI_FLAGS := $(call probe,mpi,mpi.h,MPI_Initialized(0),/usr/lib/x86_64-linux-gnu/openmpi/include /usr/include/openmpi /usr/local/include,/usr/lib/x86_64-linux-gnu/openmpi/lib /usr/lib/x86_64-linux-gnu /usr/local/lib)
endif

ifneq ($(CUDNN_FLAGS),)
$(info cuDNN: found ($(firstword $(CUDNN_FLAGS))): fused flash attention enabled)
NVCC_FLAGS += -DENABLE_CUDNN $(filter -I%,$(CUDNN_FLAGS))
NVCC_LDFLAGS += $(filter-out -I%,$(CUDNN_FLAGS))
NVCC_LDLIBS += -lcudnn
else
$(info cuDNN: not found: attention uses the plain kernel (slower). Set NO_CUDNN=1 to silence this.)
endif
ifneq ($(NCCL_FLAGS),)
$(info NCCL: found ($(firstword $(NCCL_FLAGS))): multi-GPU enabled)
NVCC_FLAGS += -DENABLE_NCCL $(filter -I%,$(NCCL_FLAGS))
NVCC_LDFLAGS += $(filter-out -I%,$(NCCL_FLAGS))
NVCC_LDLIBS += -lnccl
else
$(info NCCL: not found: single-GPU build only)
endif
ifneq ($(MPI_FLAGS),)
$(info MPI: found ($(firstword $(MPI_FLAGS))): mpirun launch enabled)
NVCC_FLAGS += -DENABLE_MPI $(filter -I%,$(MPI_FLAGS))
NVCC_LDFLAGS += $(filter-out -I%,$(MPI_FLAGS))
NVCC_LDLIBS += -lmpi
else
$(info MPI: not found: launch multi-GPU runs with -ngpu N instead of mpirun)
endif

HEADERS = $(wildcard llmc/*.h llmc/*.cuh)

# host-only checks of trainer code (no GPU needed), built with nvcc: every dev/test/test_*.cu
HOST_TESTS = $(patsubst %.cu,%,$(wildcard dev/test/test_*.cu))

.PHONY: all test venv dev clean
.DEFAULT_GOAL := train_llama_fp8
all: train_llama_fp8 test_llama_fp8 dev dev/test/test_cpu $(HOST_TESTS) dev/test/bench_checkpoint dev/data/decode_shard dev/data/upgrade_model_file

train_llama_fp8: train_llama_fp8.cu $(HEADERS)
	$(NVCC) $(NVCC_FLAGS) $< $(NVCC_LDFLAGS) $(NVCC_LDLIBS) -o $@

test_llama_fp8: test_llama_fp8.cu train_llama_fp8.cu $(HEADERS) $(wildcard dev/test/*.h)
	$(NVCC) $(NVCC_FLAGS) $< $(NVCC_LDFLAGS) $(NVCC_LDLIBS) -o $@

dev/test/test_%: dev/test/test_%.cu train_llama_fp8.cu $(HEADERS) dev/test/harness.h
	$(NVCC) $(NVCC_FLAGS) $< $(NVCC_LDFLAGS) $(NVCC_LDLIBS) -o $@

# decodes token shards back to text through llmc/tokenizer.h (README.md, "Your own data")
dev/data/decode_shard: dev/data/decode_shard.c llmc/tokenizer.h llmc/utils.h
	$(CC) $(CPU_CFLAGS) $< -o $@

# rewrites a model file of version 1 or 2 as version 3 (the checksum covers the header too)
dev/data/upgrade_model_file: dev/data/upgrade_model_file.c llmc/model_file.h llmc/llama_config.h llmc/utils.h
	$(CC) $(CPU_CFLAGS) $< -lz -o $@

# checkpoint save/load speed with the trainer's own host code (not part of make test; dev/results/checkpoint_io.md)
dev/test/bench_checkpoint: dev/test/bench_checkpoint.cu train_llama_fp8.cu $(HEADERS)
	$(NVCC) $(NVCC_FLAGS) $< $(NVCC_LDFLAGS) $(NVCC_LDLIBS) -o $@

dev/test/test_cpu: $(wildcard dev/test/*.c dev/test/*.h) $(HEADERS)
	$(CC) $(CPU_CFLAGS) $(wildcard dev/test/*.c) -lm -lz -o $@

# the fp8 scaling-grain study of issue 34 on a real model (dev/results/fp8_outliers/cpu_study.md); not in make test
dev/test/tools/fp8_grain_study: dev/test/tools/fp8_grain_study.c dev/test/llama_ref.h $(HEADERS)
	$(CC) $(CPU_CFLAGS) $< -lm -lz -o $@
# what fp8's forward alone costs a real model's loss, linear kind by linear kind (issue 34); not in make test
dev/test/tools/fp8_forward_study: dev/test/tools/fp8_forward_study.c dev/test/llama_ref.h $(HEADERS)
	$(CC) $(CPU_CFLAGS) $< -lm -lz -o $@

# CPU suite always; the GPU suite as well when a GPU answers. dev/test/run_tests.sh prints the
# combined "N passed, N failed" line last. The trainer too: test_plan_host runs it with no GPU visible.
test: train_llama_fp8 dev/test/test_cpu $(HOST_TESTS) .venv/requirements.stamp
	@bash dev/test/run_tests.sh

# the tools' and suites' Python packages and the project's own, llama_fp8, in the project's own environment
# (scripts/venv.sh): made when missing, and installed again when requirements.txt or pyproject.toml changes
venv: .venv/requirements.stamp
.venv/requirements.stamp: requirements.txt pyproject.toml
	@bash scripts/venv.sh

dev:
	$(MAKE) -C dev/cuda NVCC="$(NVCC)" GPU_ARCH=$(GPU_ARCH) CUDNN_FLAGS="$(CUDNN_FLAGS)" NCCL_FLAGS="$(NCCL_FLAGS)" MPI_FLAGS="$(MPI_FLAGS)"

clean:
	rm -f train_llama_fp8 test_llama_fp8 dev/test/test_cpu $(HOST_TESTS) dev/test/bench_checkpoint dev/data/decode_shard dev/data/upgrade_model_file dev/test/tools/fp8_grain_study dev/test/tools/fp8_forward_study
	$(MAKE) -C dev/cuda clean
