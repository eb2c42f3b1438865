# pagestream - build, test, demo, bench.
#   make            library (.so/.a), CLI, pkg-config file
#   make demo       install deps, build, pack the sample photos, stream them
#   make test       install test deps, build with -Werror, run every test
#   make asan       unit tests under ASan+UBSan
#   make fuzz       libFuzzer targets, time-bounded (FUZZ_SECONDS)
#   make bench      benchmark scenarios -> bench/RESULTS.md + plot
#   make install PREFIX=...
# BUILD=dir puts objects elsewhere (several builds side by side).

PREFIX ?= /usr/local
BUILD ?= build
CC ?= cc
CUDA ?= auto
OPT ?= -O2
CFLAGS ?= $(OPT) -g
LDFLAGS ?=
FUZZ_SECONDS ?= 20

PS_CFLAGS := -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -fPIC -pthread -Iinclude -I. $(CFLAGS)
PS_LIBS := -luring -lcurl -ljpeg -lm -lpthread

HAVE_NFS := $(shell pkg-config --exists libnfs 2>/dev/null && echo 1)
NVCC := $(shell command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
ifeq ($(CUDA),auto)
  USE_CUDA := $(if $(NVCC),1,0)
else
  USE_CUDA := $(CUDA)
endif
CUDA_HOME ?= $(if $(NVCC),$(patsubst %/bin/nvcc,%,$(NVCC)),/usr/local/cuda)

SRC_ALL := $(sort $(wildcard io/*.c format/*.c cache/*.c sampler/*.c decode/*.c loader/*.c))
SRC := $(filter-out io/nfs.c io/nfs_none.c decode/xfer_cuda.c decode/xfer_none.c,$(SRC_ALL))
ifeq ($(HAVE_NFS),1)
  SRC += io/nfs.c
  PS_LIBS += $(shell pkg-config --libs libnfs)
else
  SRC += io/nfs_none.c
endif
CU_OBJ :=
ifeq ($(USE_CUDA),1)
  SRC += decode/xfer_cuda.c
  CU_OBJ := $(BUILD)/decode/xfer_kernels.o
  PS_CFLAGS += -I$(CUDA_HOME)/include -DPS_HAVE_CUDA=1
  PS_LIBS += -L$(CUDA_HOME)/lib64 -lcudart -Wl,-rpath,$(CUDA_HOME)/lib64
else
  SRC += decode/xfer_none.c
endif

OBJ := $(SRC:%.c=$(BUILD)/%.o) $(CU_OBJ)
CLI_SRC := $(sort $(wildcard cli/*.c))
CLI_OBJ := $(CLI_SRC:%.c=$(BUILD)/%.o)
TEST_SRC := $(sort $(wildcard tests/test_*.c))
TEST_BIN := $(TEST_SRC:tests/%.c=$(BUILD)/tests/%)
TOOL_SRC := $(sort $(wildcard bench/*.c))
TOOL_BIN := $(TOOL_SRC:bench/%.c=$(BUILD)/bench/%)

LIB_A := $(BUILD)/libpagestream.a
LIB_SO := $(BUILD)/libpagestream.so
CLI := $(BUILD)/pagestream

.PHONY: all deps deps-test deps-bench demo test unit asan asan-build valgrind fuzz bench install install-python clean check-deps
all: $(LIB_SO) $(LIB_A) $(CLI) $(BUILD)/pagestream.pc $(TEST_BIN) $(TOOL_BIN)

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(PS_CFLAGS) -MMD -MP -c $< -o $@

$(BUILD)/decode/xfer_kernels.o: decode/xfer_kernels.cu decode/xfer.h
	@mkdir -p $(dir $@)
	$(NVCC) -O2 -Xcompiler -fPIC -Iinclude -I. -c $< -o $@

$(LIB_A): $(OBJ)
	@rm -f $@
	ar rcs $@ $^

$(LIB_SO): $(OBJ)
	$(CC) -shared -o $@.0 $^ $(LDFLAGS) $(PS_LIBS) -Wl,-soname,libpagestream.so.0
	ln -sf libpagestream.so.0 $@

$(CLI): $(CLI_OBJ) $(LIB_A)
	$(CC) -o $@ $(CLI_OBJ) $(LIB_A) $(LDFLAGS) $(PS_LIBS) $(CFLAGS)

$(BUILD)/tests/%: tests/%.c tests/test.h $(LIB_A)
	@mkdir -p $(dir $@)
	$(CC) $(PS_CFLAGS) -o $@ $< $(LIB_A) $(LDFLAGS) $(PS_LIBS)

$(BUILD)/bench/%: bench/%.c $(LIB_A)
	@mkdir -p $(dir $@)
	$(CC) $(PS_CFLAGS) -o $@ $< $(LIB_A) $(LDFLAGS) $(PS_LIBS)

# rewritten when PREFIX changes (the stamp holds the last one)
$(BUILD)/.prefix-$(subst /,_,$(PREFIX)):
	@mkdir -p $(BUILD)
	@rm -f $(BUILD)/.prefix-*
	@touch $@

$(BUILD)/pagestream.pc: Makefile $(BUILD)/.prefix-$(subst /,_,$(PREFIX))
	@mkdir -p $(BUILD)
	@printf 'prefix=%s\nlibdir=$${prefix}/lib\nincludedir=$${prefix}/include\n\nName: pagestream\nDescription: paged dataset loader for ML training from S3, HTTP, NFS and local disks\nVersion: 0.1.0\nLibs: -L$${libdir} -lpagestream\nLibs.private: %s\nCflags: -I$${includedir}\n' '$(PREFIX)' '$(PS_LIBS)' > $@

-include $(OBJ:.o=.d) $(CLI_OBJ:.o=.d)

# ---- dependencies ----
deps:
	@deploy/install-deps.sh build
deps-test:
	@deploy/install-deps.sh test
deps-bench:
	@deploy/install-deps.sh bench

# ---- the two commands ----
demo: deps
	@$(MAKE) --no-print-directory all
	@tests/demo.sh $(BUILD)

test: deps-test
	@$(MAKE) --no-print-directory all
	@bench/get_photos.sh build/photos
	@tests/run.sh $(BUILD)

unit: all
	@tests/run.sh --unit $(BUILD)

asan-build:
	@$(MAKE) --no-print-directory BUILD=build-asan CUDA=0 CC=clang OPT=-O1 \
	    CFLAGS="-O1 -g -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer" \
	    LDFLAGS="-fsanitize=address,undefined" build-asan/libpagestream.a $(TEST_SRC:tests/%.c=build-asan/tests/%)

asan: asan-build
	@ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 tests/run.sh --unit build-asan

valgrind: all
	@tests/run.sh --unit --valgrind $(BUILD)

FUZZ_SRC := $(sort $(wildcard tests/fuzz_*.c))
fuzz:
	@$(MAKE) --no-print-directory BUILD=build-fuzz CUDA=0 CC=clang OPT=-O1 \
	    CFLAGS="-O1 -g -fsanitize=fuzzer-no-link,address,undefined -fno-omit-frame-pointer" build-fuzz/libpagestream.a
	@mkdir -p build-fuzz/fuzz
	@set -e; for f in $(FUZZ_SRC); do n=$$(basename $$f .c); \
	  clang -std=c11 -D_GNU_SOURCE -O1 -g -Iinclude -I. -fsanitize=fuzzer,address,undefined -o build-fuzz/fuzz/$$n $$f build-fuzz/libpagestream.a $(PS_LIBS); done
	@tests/fuzz.sh build-fuzz/fuzz $(FUZZ_SECONDS)

bench: deps-bench
	@$(MAKE) --no-print-directory all
	@bench/run.sh $(BUILD)

install: all
	install -d $(DESTDIR)$(PREFIX)/lib $(DESTDIR)$(PREFIX)/include $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/lib/pkgconfig
	install -m 644 $(LIB_A) $(DESTDIR)$(PREFIX)/lib/
	install -m 755 $(LIB_SO).0 $(DESTDIR)$(PREFIX)/lib/libpagestream.so.0
	ln -sf libpagestream.so.0 $(DESTDIR)$(PREFIX)/lib/libpagestream.so
	install -m 644 include/pagestream.h $(DESTDIR)$(PREFIX)/include/
	install -m 755 $(CLI) $(DESTDIR)$(PREFIX)/bin/
	install -m 644 $(BUILD)/pagestream.pc $(DESTDIR)$(PREFIX)/lib/pkgconfig/

install-python: all
	/usr/bin/python3 python/install.py $(LIB_SO)

clean:
	rm -rf build build-asan build-fuzz
