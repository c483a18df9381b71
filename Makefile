# normgrow build. `make` builds build/normgrow; `make test` runs every test.
.DEFAULT_GOAL := all
CC      ?= gcc
BUILD   ?= build
BLAS_DIR = /usr/lib/x86_64-linux-gnu/openblas-openmp
CPPFLAGS += -Iinclude -I/usr/include/x86_64-linux-gnu/openblas-openmp -I/usr/include/cjson -MMD -MP
OPT     ?= -O2
SAN     ?=
CFLAGS  += $(OPT) -g -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -fopenmp $(SAN)
LDFLAGS += $(SAN) -fopenmp -L$(BLAS_DIR) -Wl,-rpath,$(BLAS_DIR)
LDLIBS  += -lopenblas -lcjson -lm
# The tokenizer and corpus reader: PCRE2, utf8proc, zlib.
LDLIBS  += -lpcre2-8 -lutf8proc -lz
# The communicator of data-parallel runs: OpenMPI (ref/comm_mpi.c); the Debian
# paths when pkg-config does not know it yet (before tools/bootstrap.sh installs it).
MPI_CFLAGS ?= $(or $(shell pkg-config --cflags ompi-c 2>/dev/null),-I/usr/lib/x86_64-linux-gnu/openmpi/include)
MPI_LIBS   ?= $(or $(shell pkg-config --libs ompi-c 2>/dev/null),-L/usr/lib/x86_64-linux-gnu/openmpi/lib -lmpi)
CPPFLAGS += $(MPI_CFLAGS)
LDLIBS  += $(MPI_LIBS)

# ---- the layers (docs/design.md "Layers"), each a library linked above the ones it calls
# core      libnormgrow.a: the model, losses, optimizer, data, files (ref/, less the three below)
# backends  libnormgrow_cpu.a (ref/backend_cpu.c), libnormgrow_onednn.a (accel/backend_onednn.c and
#           accel/cpu_vec.c, ONEDNN=1), libnormgrow_cuda.a (accel/cuda, CUDA=1): each calls the core (the
#           oneDNN backend the CPU's too), none another layer's
# registry  libnormgrow_registry.a (ref/registry.c): opens the backends this build has
# trainer   libnormgrow_train.a (ref/train.c): opens its run's backend through the registry
# tools     normgrow (tools/), the tests
# `make layers` prints the include graph of the sources and checks it against these layers.
CPU_SRC      := ref/backend_cpu.c
ONEDNN_SRC   := accel/backend_onednn.c accel/cpu_vec.c
# The oneDNN backend's vectorised kernels: sqrtf as the instruction (no errno
# call) and selects between computed values as blends (no floating-point traps
# assumed), so that their loops vectorise. Neither changes a value (IEEE
# results, same order of operations; not fast-math).
$(BUILD)/accel/cpu_vec.o: CFLAGS += -fno-math-errno -fno-trapping-math
REGISTRY_SRC := ref/registry.c
TRAIN_SRC    := ref/train.c
CORE_SRC  := $(filter-out $(CPU_SRC) $(REGISTRY_SRC) $(TRAIN_SRC),$(wildcard ref/*.c))
TOOL_SRC  := $(wildcard tools/*.c)
TEST_SRC  := $(wildcard tests/test_*.c)
obj        = $(1:%.c=$(BUILD)/%.o)
TOOL_OBJ  := $(call obj,$(TOOL_SRC))
TEST_BIN  := $(TEST_SRC:tests/%.c=$(BUILD)/tests/%)
LIB          := $(BUILD)/libnormgrow.a
CPU_LIB      := $(BUILD)/libnormgrow_cpu.a
ONEDNN_LIB   := $(BUILD)/libnormgrow_onednn.a
REGISTRY_LIB := $(BUILD)/libnormgrow_registry.a
TRAIN_LIB    := $(BUILD)/libnormgrow_train.a
DEPS_OK   := $(BUILD)/.deps-ok

# ---- the oneDNN backend (accel/backend_onednn.c) -----------------------------------
# Built by default; `make ONEDNN=0` builds the OpenMP + OpenBLAS reference without
# libdnnl: the registry then has no "onednn", and `normgrow bench` measures the
# reference alone.
ONEDNN    ?= 1

# ---- CUDA backend (accel/cuda) ---------------------------------------------------
# Built when nvcc is found (on PATH or in /usr/local/cuda); `make CUDA=0` turns it
# off. It makes $(BUILD)/libnormgrow_cuda.a, registers "cuda" in the backend
# registry (ref/registry.c is compiled with -DNG_WITH_CUDA), links normgrow and
# every test with it (and with the toolkit's NCCL, the communicator of its
# ranks under mpirun: accel/cuda/comm_nccl.c), and builds tests/test_cuda.c (one "skip"
# line when no GPU can be used) and $(BUILD)/bench_cuda. Without it everything
# else builds and tests unchanged. Never --use_fast_math.
NVCC      ?= $(firstword $(shell command -v nvcc 2>/dev/null) $(wildcard /usr/local/cuda/bin/nvcc))
CUDA      ?= $(if $(NVCC),1,0)
# The objects that name the backends this build has (-DNG_WITH_ONEDNN, -DNG_WITH_CUDA)
# are rebuilt when CUDA or ONEDNN changes in the same BUILD (this stamp is new then).
BACKENDS_STAMP := $(BUILD)/.backends-cuda$(CUDA)-onednn$(ONEDNN)
BACKENDS_OBJ   := $(BUILD)/ref/registry.o $(BUILD)/tools/cmd_bench.o
$(BACKENDS_STAMP):
	@mkdir -p $(BUILD)
	@rm -f $(BUILD)/.backends-*
	@touch $@
$(BACKENDS_OBJ): $(BACKENDS_STAMP)
ifeq ($(ONEDNN),1)
$(BACKENDS_OBJ): CPPFLAGS += -DNG_WITH_ONEDNN
LDLIBS    += -ldnnl
endif
CUDA_LIB  := $(BUILD)/libnormgrow_cuda.a
# What normgrow and the tests link, in order, each library above the ones it calls
# (one pass, no link group), and depend on.
NG_LIBS   := $(TRAIN_LIB) $(REGISTRY_LIB) $(if $(filter 1,$(CUDA)),$(CUDA_LIB)) \
             $(if $(filter 1,$(ONEDNN)),$(ONEDNN_LIB)) $(CPU_LIB) $(LIB)
NG_DEPS   := $(NG_LIBS)
.PHONY: bench-cuda cuda-ptxas gpu-bundle
comma     := ,
BUNDLE    := $(BUILD)/gpu-bundle
# make test proves the bundle runs bare (tests/t_gpu_bundle.sh) where one can be built:
# with the CUDA backend and without sanitizers; otherwise the test says why not.
BUNDLE_SKIP := $(if $(filter 1,$(CUDA)),$(if $(SAN),this is a sanitizer build,),this build has no CUDA backend (nvcc not found$(comma) or CUDA=0))
ifeq ($(CUDA),1)
CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(NVCC))
CUDA_ARCH ?= -gencode arch=compute_90,code=[sm_90,compute_90]
NVCCFLAGS ?= $(OPT) -g -std=c++17 -Werror all-warnings -Xcompiler -Wall,-Wextra,-Werror
CUDA_OBJ  := $(patsubst %.cu,$(BUILD)/%.o,$(wildcard accel/cuda/*.cu)) $(BUILD)/accel/cuda/launch.o $(BUILD)/accel/cuda/comm_nccl.o
# NCCL when the toolkit has it (accel/cuda/comm_nccl.c: without it, cuda ranks
# under mpirun are refused in one line).
LDLIBS    += -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 $(if $(wildcard $(CUDA_HOME)/include/nccl.h),-lnccl) -lcublas -lcudart -lstdc++
$(BUILD)/accel/cuda/comm_nccl.o $(BUILD)/tests/test_cuda.o $(BUILD)/accel/cuda/bench_cuda.o: CPPFLAGS += -I$(CUDA_HOME)/include
$(BACKENDS_OBJ): CPPFLAGS += -DNG_WITH_CUDA
all: $(CUDA_LIB) $(BUILD)/bench_cuda

$(BUILD)/accel/cuda/%.o: accel/cuda/%.cu | $(DEPS_OK)
	@mkdir -p $(dir $@)
	$(NVCC) $(CPPFLAGS) $(NVCCFLAGS) $(CUDA_ARCH) -c $< -o $@

$(CUDA_LIB): $(CUDA_OBJ)
	$(AR) rcs $@ $^

$(BUILD)/bench_cuda: $(BUILD)/accel/cuda/bench_cuda.o $(NG_DEPS)
	$(CC) $(LDFLAGS) $< $(NG_LIBS) $(LDLIBS) -o $@

# The transformer block forward + backward on the GPU, per kernel (needs a GPU).
bench-cuda: $(BUILD)/bench_cuda
	$(BUILD)/bench_cuda

# Registers, spills and shared memory of every kernel (ptxas -v) -> $(BUILD)/cuda-ptxas.txt
cuda-ptxas:
	@mkdir -p $(BUILD)
	for f in accel/cuda/*.cu; do $(NVCC) -Iinclude $(NVCCFLAGS) $(CUDA_ARCH) -Xptxas -v -c $$f -o /dev/null || exit 1; done 2>$(BUILD)/cuda-ptxas.txt
	@grep -c 'Compiling entry' $(BUILD)/cuda-ptxas.txt | sed 's|$$| kernels: $(BUILD)/cuda-ptxas.txt|'

# The GPU bundle (docs/cuda.md "The GPU window"): normgrow, test_cuda, test_backends
# and bench_cuda linked again from the same objects into $(BUNDLE)/bin, with the CUDA
# runtime static, no debug sections and DT_RPATH $ORIGIN/../lib (searched for the
# libraries' own dependencies too); tools/gpu_bundle.sh packs beside them the shared
# libraries a bare CUDA machine lacks (lib.tgz), the toy arm and its CPU metrics, and
# the objects and sources that relink them on such a machine.
BUNDLE_BIN := $(addprefix $(BUNDLE)/bin/,normgrow test_cuda test_backends bench_cuda)
BUNDLE_LDFLAGS = $(filter-out -Wl$(comma)-rpath$(comma)%,$(LDFLAGS)) -Wl,-S -Wl,--disable-new-dtags -Wl,-rpath,'$$ORIGIN/../lib'
BUNDLE_LDLIBS  = $(filter-out -Wl$(comma)-rpath$(comma)% -lcudart,$(LDLIBS)) -lcudart_static -ldl -lrt -lpthread
.SECONDARY: $(BUILD)/tests/test_cuda.o $(BUILD)/tests/test_backends.o
$(BUNDLE)/bin/normgrow: $(TOOL_OBJ) $(NG_DEPS)
	@mkdir -p $(dir $@)
	$(CC) $(BUNDLE_LDFLAGS) $(TOOL_OBJ) $(NG_LIBS) $(BUNDLE_LDLIBS) -o $@
$(BUNDLE)/bin/bench_cuda: $(BUILD)/accel/cuda/bench_cuda.o $(NG_DEPS)
	@mkdir -p $(dir $@)
	$(CC) $(BUNDLE_LDFLAGS) $< $(NG_LIBS) $(BUNDLE_LDLIBS) -o $@
$(BUNDLE)/bin/test_%: $(BUILD)/tests/test_%.o $(NG_DEPS)
	@mkdir -p $(dir $@)
	$(CC) $(BUNDLE_LDFLAGS) $< $(NG_LIBS) $(BUNDLE_LDLIBS) -o $@
gpu-bundle: $(BUNDLE_BIN) $(BUILD)/normgrow
	NVCC='$(NVCC)' CUDA_FLAGS='$(OPT) -std=c++17 $(CUDA_ARCH)' NG_LIBS='$(notdir $(NG_LIBS))' tools/gpu_bundle.sh pack $(BUILD) $(BUNDLE)

-include $(CUDA_OBJ:.o=.d) $(BUILD)/accel/cuda/bench_cuda.d
else
TEST_BIN  := $(filter-out $(BUILD)/tests/test_cuda,$(TEST_BIN))
bench-cuda:
	@echo "bench-cuda: this build has no CUDA backend (nvcc not found, or CUDA=0)" >&2; exit 1
gpu-bundle:
	@echo "gpu-bundle: this build has no CUDA backend (nvcc not found, or CUDA=0)" >&2; exit 1
endif
# ---- end of the CUDA backend ------------------------------------------------------

.PHONY: all test layers asan fuzz bench bench-torch soak demo calibrate study-rehearsal golden golden-new crosscheck clean deps readme-numbers
SEEDS ?= 1
all: $(BUILD)/normgrow

deps: $(DEPS_OK)
$(DEPS_OK): tools/bootstrap.sh
	@mkdir -p $(BUILD)
	@ONEDNN=$(ONEDNN) tools/bootstrap.sh
	@touch $@

$(BUILD)/%.o: %.c | $(DEPS_OK)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -c $< -o $@

# The report command runs the Python package tools/report; an installed normgrow
# finds it in the source tree it was built from.
$(BUILD)/tools/python_cmd.o: CPPFLAGS += -DNG_SOURCE_TOOLS='"$(CURDIR)/tools"'

# ref/hf.c builds in the transformers code it writes beside exported weights.
$(BUILD)/ref/hf.o: $(wildcard ref/hf_remote/*.py)

$(LIB): $(call obj,$(CORE_SRC))
$(CPU_LIB): $(call obj,$(CPU_SRC))
$(ONEDNN_LIB): $(call obj,$(ONEDNN_SRC))
$(REGISTRY_LIB): $(call obj,$(REGISTRY_SRC))
$(TRAIN_LIB): $(call obj,$(TRAIN_SRC))
$(LIB) $(CPU_LIB) $(ONEDNN_LIB) $(REGISTRY_LIB) $(TRAIN_LIB):
	@rm -f $@
	$(AR) rcs $@ $^

$(BUILD)/normgrow: $(TOOL_OBJ) $(NG_DEPS)
	$(CC) $(LDFLAGS) $(TOOL_OBJ) $(NG_LIBS) $(LDLIBS) -o $@

$(BUILD)/tests/%: $(BUILD)/tests/%.o $(NG_DEPS)
	$(CC) $(LDFLAGS) $< $(NG_LIBS) $(LDLIBS) -o $@

# The include graph of the sources, checked against the layers (no circle, no upward
# include), and this build's libraries against their link order (no upward call).
layers: $(NG_DEPS)
	tools/layers.sh $(NG_LIBS)

test: $(BUILD)/normgrow $(TEST_BIN) $(if $(BUNDLE_SKIP),,gpu-bundle)
	@NG_BUNDLE_SKIP='$(BUNDLE_SKIP)' tests/run.sh $(BUILD)

# The same tests under AddressSanitizer (leaks included) and UBSan, in their own build dir.
asan:
	$(MAKE) BUILD=build/asan OPT=-O1 SAN="-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer" test

# libFuzzer harnesses of every file reader (clang, ASan, UBSan), FUZZ_SECONDS each;
# executions and coverage per target in build/fuzz/summary.txt (tests/fuzz/run.sh).
FUZZ_SECONDS ?= 60
fuzz:
	tools/bootstrap.sh fuzz
	tests/fuzz/run.sh $(FUZZ_SECONDS)

# The whole toy study (about 15 minutes on 2 cores); SEEDS=N repeats every arm;
# BACKEND=onednn PRECISION=bf16 runs it there; STUDY=placements|divergences|interventions|large
# runs that study instead (tools/demo.sh; runs/demo-<study>).
demo: $(BUILD)/normgrow
	tools/demo.sh --seeds $(SEEDS) $(if $(JOBS),--jobs $(JOBS)) $(if $(BACKEND),--backend $(BACKEND)) $(if $(PRECISION),--precision $(PRECISION)) $(if $(STUDY),--study $(STUDY))

# Peak learning rates calibrated per placement, then the grown arms (with CONTROLS=1
# the controls, with HYBRID=1 the hybrid growths, with DIVERGENCES=1 the grown arms under
# reverse KL and JSD, with INTERVENTIONS=1 grown Pre-Norm with each intervention on the
# stream's scale) at the calibrated rates and their report (tools/calibrate.sh;
# runs/calibrate-<set>; hours on 2 cores). SET=toy|toy-large, PLACEMENTS=pre,post,...
# (default: all six), LRS=a,b,c, WARMUPS=a,b,c (tokens: the warmup calibrated at each
# placement's peak), JOBS, THREADS, BACKEND, PRECISION; seeds 1, 2, 3.
# Needs the set's data and teacher: `make demo` (toy) or `make demo STUDY=large`.
calibrate: $(BUILD)/normgrow
	tools/calibrate.sh --set $(or $(SET),toy) $(if $(PLACEMENTS),--placements $(PLACEMENTS)) $(if $(LRS),--lrs $(LRS)) $(if $(WARMUPS),--warmups $(WARMUPS)) $(if $(JOBS),--jobs $(JOBS)) $(if $(THREADS),--threads $(THREADS)) $(if $(BACKEND),--backend $(BACKEND)) $(if $(PRECISION),--precision $(PRECISION)) $(if $(CONTROLS),--controls) $(if $(HYBRID),--hybrid) $(if $(DIVERGENCES),--divergences) $(if $(INTERVENTIONS),--interventions)

# The study's launcher (tools/study.sh) end to end on toy shapes under mpirun -np 2, stopped
# once and continued, against one process (a few minutes on 2 cores; runs/rehearsal).
study-rehearsal: $(BUILD)/normgrow $(BUILD)/tests/test_mpi
	BUILD=$(BUILD) tools/study_rehearsal.sh

bench: $(BUILD)/normgrow
	$(BUILD)/normgrow bench

# SIGKILL a growing run at KILLS random moments, resume each time: identical end (slow).
KILLS ?= 20
soak: $(BUILD)/normgrow
	tools/kill_soak.sh --kills $(KILLS) --bin $(BUILD)/normgrow

# The same step in PyTorch (python3-torch), for a side-by-side comparison with `make bench`.
bench-torch:
	tools/bootstrap.sh torch
	/usr/bin/python3 tools/bench_torch.py

# The README's numbers made anew from run directories (tools/report/readme.py):
# make readme-numbers RUNS="demo=runs/demo bf16=../other/runs/demo"; a label named twice is
# the union of its directories; a block whose runs are not named is left as it is.
# CHECK=1 only says which blocks differ.
readme-numbers:
	PYTHONPATH=tools /usr/bin/python3 -m report.readme README.md $(foreach r,$(RUNS),--runs $(r)) $(if $(CHECK),--check,--out README.md --force)

# Recompute the expected outputs of every golden case from its own inputs.
golden: $(BUILD)/normgrow
	$(BUILD)/normgrow golden-update golden/*.safetensors

# Make every golden case anew from golden/specs/*.json (new random inputs from each seed).
golden-new: $(BUILD)/normgrow
	for s in golden/specs/*.json; do $(BUILD)/normgrow golden-make $$s golden/$$(basename $$s .json).safetensors --force || exit 1; done

# Independent float64 PyTorch cross-check on random cases (needs python3-torch).
crosscheck: $(BUILD)/normgrow
	tools/bootstrap.sh torch
	/usr/bin/python3 tools/crosscheck_torch.py --cases 40 --seed 1 --bin $(BUILD)/normgrow

clean:
	rm -rf $(BUILD)

-include $(patsubst %.o,%.d,$(call obj,$(wildcard ref/*.c) $(ONEDNN_SRC))) $(TOOL_OBJ:.o=.d) $(TEST_SRC:tests/%.c=$(BUILD)/tests/%.d)
