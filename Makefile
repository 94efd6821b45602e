# vramd: one non-recursive Makefile. Quiet unless V=1.
#
#   make            build vramd, libvram.so, vramctl
#   make test       build and run every test (last line: N passed, N failed)
#   make demo       run one co-located RL cycle on the host backend
#   make asan       the same test suite under ASan + UBSan (build-asan/)
#   make bench      control-path benchmark (bench/rpc)
#   make test-gpu   GPU tests (needs a GPU; see docs/gpu.md), PyTorch's too
#   make bench-gpu  GPU benchmarks
#   make bench-torch  PyTorch pause/resume benchmark (GPU + torch; docs/python.md)
#   make install    PREFIX=/usr/local DESTDIR=
#   make proto      regenerate proto/vram.pb-c.[ch] from proto/vram.proto

BUILD ?= build
PREFIX ?= /usr/local
DESTDIR ?=
CC ?= cc
SANITIZE ?=

PKGS := libuv libprotobuf-c libsystemd
DEB_PKGS := gcc make pkg-config libuv1-dev libprotobuf-c-dev \
	protobuf-c-compiler libsystemd-dev python3 python3-pytest libamdhip64-dev

ifeq ($(V),1)
Q :=
msg = @true
else
Q := @
msg = @printf '  %-8s %s\n' $(1) $(2);
endif

PKG_CFLAGS = $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS_DAEMON = $(shell pkg-config --libs libuv libprotobuf-c libsystemd 2>/dev/null)
PKG_LIBS_CLIENT = $(shell pkg-config --libs libprotobuf-c 2>/dev/null)

WARN := -Wall -Wextra -Werror -Wmissing-prototypes -Wvla -Wshadow \
	-Wno-unused-parameter
CFLAGS ?= -O2 -g
BASE_CFLAGS := -std=gnu11 -fPIC -D_GNU_SOURCE $(WARN) $(CFLAGS) $(SANITIZE) $(PKG_CFLAGS)

# Each product sees only its own folder and the layers below it, so a file
# that reaches into another product's folder does not compile.
PROTO_INC := -Iproto
DAEMON_INC := -Iproto -Icommon -Idaemon -Idaemon/backend
LIBVRAM_INC := -Iproto -Icommon -Ilibvram -Ilibvram/include -Ilibvram/vmm
PUBLIC_INC := -Ilibvram/include
TEST_INC := -Itests -Itests/harness -Itests/unit -Icommon

# The include path of an object, by the folder (or, in tests/unit, the
# prefix) of its source.
inc_for = $(strip \
	$(if $(filter daemon/%,$(1)),$(DAEMON_INC), \
	$(if $(filter libvram/%,$(1)),$(LIBVRAM_INC), \
	$(if $(filter proto/%,$(1)),$(PROTO_INC), \
	$(if $(filter vramctl/% demo/%,$(1)),$(PUBLIC_INC), \
	$(if $(filter tests/unit/daemon_%,$(1)),$(DAEMON_INC) $(TEST_INC), \
	$(if $(filter tests/unit/client_%,$(1)),$(LIBVRAM_INC) $(TEST_INC), \
	$(if $(filter tests/unit/wire_%,$(1)),$(PROTO_INC) $(TEST_INC), \
	$(if $(filter tests/gpu/% bench/%,$(1)),$(PUBLIC_INC) -Icommon $(TEST_INC), \
	$(PUBLIC_INC) $(TEST_INC))))))))))
# Generated code is not ours to lint.
GEN_CFLAGS := $(filter-out -Werror -Wmissing-prototypes -Wshadow,$(BASE_CFLAGS)) $(PROTO_INC)
LDFLAGS_ALL := $(SANITIZE) $(LDFLAGS)

PROTO_SRC := proto/vram.pb-c.c proto/wire.c
DAEMON_SRC := $(filter-out daemon/main.c,$(wildcard daemon/*.c daemon/backend/*.c))
CLIENT_SRC := $(wildcard libvram/*.c libvram/vmm/*.c)
VRAMCTL_SRC := $(wildcard vramctl/*.c)
HARNESS_SRC := $(wildcard tests/harness/*.c)
UNIT_SRC := $(wildcard tests/unit/*.c)
INTEG_SRC := $(wildcard tests/integration/*.c)
GPU_SRC := $(wildcard tests/gpu/*.c)
DEMO_SRC := $(wildcard demo/*.c)
BENCH_SRC := $(wildcard bench/*.c)

obj = $(patsubst %.c,$(BUILD)/obj/%.o,$(1))

PROTO_OBJ := $(call obj,$(PROTO_SRC))
DAEMON_OBJ := $(call obj,$(DAEMON_SRC))
CLIENT_OBJ := $(call obj,$(CLIENT_SRC))
HARNESS_OBJ := $(call obj,$(HARNESS_SRC))

VRAMD := $(BUILD)/vramd
LIBVRAM := $(BUILD)/libvram.so.0
VRAMCTL := $(BUILD)/vramctl
RUNNER := $(BUILD)/tests/runner
UNIT_BIN := $(patsubst tests/unit/%.c,$(BUILD)/tests/%,$(UNIT_SRC))
INTEG_BIN := $(patsubst tests/integration/%.c,$(BUILD)/tests/%,$(INTEG_SRC))
GPU_BIN := $(patsubst tests/gpu/%.c,$(BUILD)/tests/gpu/%,$(GPU_SRC))
DEMO_BIN := $(patsubst demo/%.c,$(BUILD)/demo/%,$(DEMO_SRC))
BENCH_BIN := $(patsubst bench/%.c,$(BUILD)/bench/%,$(BENCH_SRC))

.PHONY: all deps test asan demo bench test-gpu bench-gpu bench-torch install proto clean
# Keep intermediate objects between runs.
.SECONDARY:
all: $(VRAMD) $(LIBVRAM) $(VRAMCTL)

# ---- dependencies: install what is missing when root, else say how -----
DEPS_STAMP := $(BUILD)/.deps-ok
deps: $(DEPS_STAMP)
$(DEPS_STAMP):
	$(Q)./etc/install-deps.sh $(DEB_PKGS)
	$(Q)mkdir -p $(@D) && touch $@

# ---- objects --------------------------------------------------------------
$(BUILD)/obj/proto/vram.pb-c.o: proto/vram.pb-c.c proto/vram.pb-c.h
	$(call msg,CC,$<)
	$(Q)mkdir -p $(@D) && $(CC) $(GEN_CFLAGS) -c -o $@ $<

$(BUILD)/obj/%.o: %.c | $(DEPS_STAMP)
	$(call msg,CC,$<)
	$(Q)mkdir -p $(@D) && $(CC) $(BASE_CFLAGS) $(call inc_for,$<) -MMD -MP -c -o $@ $<

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)

proto/vram.pb-c.c proto/vram.pb-c.h: proto/vram.proto
	$(call msg,PROTOC,$<)
	$(Q)cd proto && protoc-c --c_out=. vram.proto
proto: proto/vram.pb-c.c

# Every object that includes the generated header waits for it.
$(PROTO_OBJ) $(DAEMON_OBJ) $(CLIENT_OBJ): proto/vram.pb-c.h

# ---- programs -------------------------------------------------------------
$(BUILD)/libvramd.a: $(DAEMON_OBJ) $(PROTO_OBJ)
	$(call msg,AR,$@)
	$(Q)rm -f $@ && ar rcs $@ $^

$(BUILD)/libvram-internal.a: $(CLIENT_OBJ) $(PROTO_OBJ)
	$(call msg,AR,$@)
	$(Q)rm -f $@ && ar rcs $@ $^

# Linked from the objects, not the archive: the GPU backends are reached
# through weak references, which would not pull them out of an archive.
$(VRAMD): $(call obj,daemon/main.c) $(DAEMON_OBJ) $(PROTO_OBJ)
	$(call msg,LD,$@)
	$(Q)$(CC) $(LDFLAGS_ALL) -o $@ $^ $(PKG_LIBS_DAEMON) -ldl -lm -lpthread

$(LIBVRAM): $(CLIENT_OBJ) $(PROTO_OBJ) libvram/libvram.syms
	$(call msg,LD,$@)
	$(Q)$(CC) $(LDFLAGS_ALL) -shared -Wl,-soname,libvram.so.0 \
		-Wl,--version-script=libvram/libvram.syms -Wl,-z,defs \
		-o $@ $(CLIENT_OBJ) $(PROTO_OBJ) $(PKG_LIBS_CLIENT) -ldl -lpthread
	$(Q)ln -sf libvram.so.0 $(BUILD)/libvram.so

# Programs that use only the public header link the shared library.
PUBLIC_LINK = -L$(BUILD) -lvram -Wl,-rpath,'$$ORIGIN':'$$ORIGIN/..':'$$ORIGIN/../..'

$(VRAMCTL): $(call obj,$(VRAMCTL_SRC)) $(LIBVRAM)
	$(call msg,LD,$@)
	$(Q)$(CC) $(LDFLAGS_ALL) -o $@ $(call obj,$(VRAMCTL_SRC)) $(PUBLIC_LINK)

$(BUILD)/demo/%: $(BUILD)/obj/demo/%.o $(LIBVRAM)
	$(call msg,LD,$@)
	$(Q)mkdir -p $(@D) && $(CC) $(LDFLAGS_ALL) -o $@ $< $(PUBLIC_LINK)

$(BUILD)/bench/%: $(BUILD)/obj/bench/%.o $(HARNESS_OBJ) $(LIBVRAM)
	$(call msg,LD,$@)
	$(Q)mkdir -p $(@D) && $(CC) $(LDFLAGS_ALL) -o $@ $< $(HARNESS_OBJ) \
		$(PUBLIC_LINK) -lpthread -lm -ldl

# ---- tests ----------------------------------------------------------------
# Unit tests link the internals they test, chosen by file name:
# daemon_*.c the daemon's archive, client_*.c libvram's, wire_*.c proto.
$(RUNNER): $(call obj,tests/runner.c)
	$(call msg,LD,$@)
	$(Q)mkdir -p $(@D) && $(CC) $(LDFLAGS_ALL) -o $@ $^

TEST_MAIN := $(call obj,tests/test_main.c)

$(BUILD)/tests/daemon_%: $(BUILD)/obj/tests/unit/daemon_%.o $(TEST_MAIN) $(HARNESS_OBJ) $(BUILD)/libvramd.a
	$(call msg,LD,$@)
	$(Q)mkdir -p $(@D) && $(CC) $(LDFLAGS_ALL) -o $@ $^ $(PKG_LIBS_DAEMON) -ldl -lm

$(BUILD)/tests/client_%: $(BUILD)/obj/tests/unit/client_%.o $(TEST_MAIN) $(HARNESS_OBJ) $(BUILD)/libvram-internal.a
	$(call msg,LD,$@)
	$(Q)mkdir -p $(@D) && $(CC) $(LDFLAGS_ALL) -o $@ $^ $(PKG_LIBS_CLIENT) -ldl -lpthread

$(BUILD)/tests/wire_%: $(BUILD)/obj/tests/unit/wire_%.o $(TEST_MAIN) $(HARNESS_OBJ) $(PROTO_OBJ)
	$(call msg,LD,$@)
	$(Q)mkdir -p $(@D) && $(CC) $(LDFLAGS_ALL) -o $@ $^ $(PKG_LIBS_CLIENT)

# Integration tests use the public API against a real vramd.
$(BUILD)/tests/%: $(BUILD)/obj/tests/integration/%.o $(TEST_MAIN) $(HARNESS_OBJ) $(LIBVRAM)
	$(call msg,LD,$@)
	$(Q)mkdir -p $(@D) && $(CC) $(LDFLAGS_ALL) -o $@ $< $(TEST_MAIN) $(HARNESS_OBJ) \
		$(PUBLIC_LINK) -lpthread -ldl

$(BUILD)/tests/gpu/%: $(BUILD)/obj/tests/gpu/%.o $(TEST_MAIN) $(HARNESS_OBJ) $(LIBVRAM)
	$(call msg,LD,$@)
	$(Q)mkdir -p $(@D) && $(CC) $(LDFLAGS_ALL) -o $@ $< $(TEST_MAIN) $(HARNESS_OBJ) \
		$(PUBLIC_LINK) -lpthread -ldl

TEST_ENV = VRAMD_BIN=$(abspath $(VRAMD)) VRAMCTL_BIN=$(abspath $(VRAMCTL)) \
	VRAM_BUILD=$(abspath $(BUILD))

# The Python tests (pytest, through the runner's protocol) load libvram into
# the interpreter, which a sanitized libvram cannot be: not under asan.
PY_TESTS := $(if $(SANITIZE),,tests/python/run_pytest)

test: all $(RUNNER) $(UNIT_BIN) $(INTEG_BIN) $(DEMO_BIN)
	$(Q)$(TEST_ENV) $(RUNNER) $(UNIT_BIN) $(INTEG_BIN) $(PY_TESTS)

asan:
	$(Q)$(MAKE) --no-print-directory BUILD=build-asan CFLAGS='-O1 -g' \
		SANITIZE='-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all' test

test-gpu: all $(RUNNER) $(GPU_BIN)
	$(Q)$(TEST_ENV) $(RUNNER) $(GPU_BIN) tests/gpu/torch_test.py

demo: all $(DEMO_BIN)
	$(Q)$(TEST_ENV) ./demo/run.sh

bench: all $(BENCH_BIN)
	$(Q)$(TEST_ENV) $(BUILD)/bench/rpc

bench-gpu: all $(BENCH_BIN)
	$(Q)$(TEST_ENV) ./bench/gpu.sh

bench-torch: all $(BUILD)/bench/gpu_raw
	$(Q)$(TEST_ENV) python3 bench/torch_bench.py

install: all
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/lib \
		$(DESTDIR)$(PREFIX)/include $(DESTDIR)$(PREFIX)/lib/systemd/system \
		$(DESTDIR)/etc/vramd
	install -m 755 $(VRAMD) $(VRAMCTL) $(DESTDIR)$(PREFIX)/bin/
	install -m 755 $(LIBVRAM) $(DESTDIR)$(PREFIX)/lib/
	ln -sf libvram.so.0 $(DESTDIR)$(PREFIX)/lib/libvram.so
	install -m 644 libvram/include/vram.h $(DESTDIR)$(PREFIX)/include/
	install -m 644 etc/vramd.service etc/vramd.socket $(DESTDIR)$(PREFIX)/lib/systemd/system/
	install -m 644 etc/vramd.conf $(DESTDIR)/etc/vramd/
	install -d $(DESTDIR)$(PREFIX)/share/man/man1
	install -m 644 docs/vramctl.1 $(DESTDIR)$(PREFIX)/share/man/man1/

clean:
	rm -rf build build-asan

# ---- libvram-preload.so: whole-process capture (docs/preload.md) ----------
# A product of its own over libvram's public API: compiled with the public
# header only, exporting just the runtime calls it replaces and its
# vram_preload_* entry points. Tested by tests/integration/preload_test.c
# through a program linked against a fake CUDA runtime.
PRELOAD := $(BUILD)/libvram-preload.so
PRELOAD_SRC := $(wildcard libvram/preload/*.c)
PRELOAD_OBJ := $(call obj,$(PRELOAD_SRC))
PRELOAD_INC := $(PUBLIC_INC) -Ilibvram/preload
CUDART_FAKE := $(BUILD)/tests/libcudart_fake.so
PRELOAD_CHILD := $(BUILD)/tests/preload/preload_child

all: $(PRELOAD)

$(BUILD)/obj/libvram/preload/%.o: libvram/preload/%.c | $(DEPS_STAMP)
	$(call msg,CC,$<)
	$(Q)mkdir -p $(@D) && $(CC) $(BASE_CFLAGS) -fvisibility=hidden \
		$(PRELOAD_INC) -MMD -MP -c -o $@ $<

$(PRELOAD): $(PRELOAD_OBJ) $(LIBVRAM)
	$(call msg,LD,$@)
	$(Q)$(CC) $(LDFLAGS_ALL) -shared -Wl,-soname,libvram-preload.so \
		-Wl,-z,defs -o $@ $(PRELOAD_OBJ) $(PUBLIC_LINK) -ldl -lpthread

$(CUDART_FAKE): tests/unit/cudart_fake/libcudart_fake.c
	$(call msg,LD,$@)
	$(Q)mkdir -p $(@D) && $(CC) $(BASE_CFLAGS) -shared \
		-Wl,-soname,libcudart_fake.so -o $@ $< -lpthread

$(BUILD)/obj/tests/integration/preload/%.o: tests/integration/preload/%.c | $(DEPS_STAMP)
	$(call msg,CC,$<)
	$(Q)mkdir -p $(@D) && $(CC) $(BASE_CFLAGS) $(PRELOAD_INC) \
		-MMD -MP -c -o $@ $<

$(PRELOAD_CHILD): $(BUILD)/obj/tests/integration/preload/preload_child.o $(CUDART_FAKE)
	$(call msg,LD,$@)
	$(Q)mkdir -p $(@D) && $(CC) $(LDFLAGS_ALL) -o $@ $< \
		-L$(BUILD)/tests -lcudart_fake -Wl,-rpath,'$$ORIGIN/..' -ldl

test: $(PRELOAD) $(PRELOAD_CHILD)
install: install-preload
.PHONY: install-preload
install-preload: $(PRELOAD)
	install -d $(DESTDIR)$(PREFIX)/lib $(DESTDIR)$(PREFIX)/include
	install -m 755 $(PRELOAD) $(DESTDIR)$(PREFIX)/lib/
	install -m 644 libvram/preload/vram_preload.h $(DESTDIR)$(PREFIX)/include/

# ---- container images (etc/container/; docs/kubernetes.md) -----------------
# Builds vramd's image and a client image from the project's .debs
# (dpkg-buildpackage -us -uc -b puts them in CONTAINER_DEBS) and tries them.
# Not part of `make test`: it needs podman (or buildah, docker) and minutes.
CONTAINER_DEBS ?= ..
CONTAINER_TOOL ?= podman
.PHONY: container
container:
	etc/container/build-image.sh -d $(CONTAINER_DEBS) -t $(CONTAINER_TOOL)
