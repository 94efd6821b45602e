# SPDX-License-Identifier: Apache-2.0
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
#   make install    PREFIX=/usr/local DESTDIR= (make uninstall: the same)
#   make test-deb   build the Debian packages, install and remove them in a
#                   throwaway root
#   make chaos-restart N=200  vramd SIGKILLed at random points N times
#                   under the fd-store harness; prints its counts
#   make test-systemd  vramd under a real systemd in a namespace (root;
#                   tests/system/systemd_run, docs/operations.md)
#   make proto      regenerate proto/vram.pb-c.[ch] from proto/vram.proto

BUILD ?= build
# An absolute BUILD inside the tree (tools/gpu-prepare.sh, install_test)
# is made relative, so that the objects' dependency files name the same
# targets whichever way make was called: with two spellings, a header's
# change did not rebuild what an earlier absolute call had built.
override BUILD := $(patsubst $(CURDIR)/%,%,$(BUILD))
PREFIX ?= /usr/local
DESTDIR ?=
CC ?= cc
SANITIZE ?=

PKGS := libuv libprotobuf-c libsystemd libmicrohttpd
# What make and make test need. Not libamdhip64-dev (~190 MiB with
# libllvm15): only tests/unit/daemon_hip_abi_test.c reads its headers, and
# it skips without them (`make deps-hip` installs them).
DEB_PKGS := gcc make pkg-config libuv1-dev libprotobuf-c-dev \
	protobuf-c-compiler libsystemd-dev libmicrohttpd-dev python3 python3-pytest \
	bash-completion
DEB_PKGS_HIP := libamdhip64-dev
# What make test-deb needs on top: the packaging tools, and for
# docs/python.md's venv line (a case of make test, skipped without them)
# venv and Debian's wheels.
DEB_PKGS_DEB := dpkg-dev debhelper dh-python python3-all fakeroot lintian \
	python3-venv python3-setuptools-whl python3-wheel-whl

ifeq ($(V),1)
Q :=
msg = @true
else
Q := @
msg = @printf '  %-8s %s\n' $(1) $(2);
endif

PKG_CFLAGS = $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS_DAEMON = $(shell pkg-config --libs libuv libprotobuf-c libsystemd libmicrohttpd 2>/dev/null)
PKG_LIBS_CLIENT = $(shell pkg-config --libs libprotobuf-c 2>/dev/null)

WARN := -Wall -Wextra -Werror -Wmissing-prototypes -Wvla -Wshadow
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
PRELOAD := $(BUILD)/libvram-preload.so
RUNNER := $(BUILD)/tests/runner
UNIT_BIN := $(patsubst tests/unit/%.c,$(BUILD)/tests/%,$(UNIT_SRC))
INTEG_BIN := $(patsubst tests/integration/%.c,$(BUILD)/tests/%,$(INTEG_SRC))
GPU_BIN := $(patsubst tests/gpu/%.c,$(BUILD)/tests/gpu/%,$(GPU_SRC))
DEMO_BIN := $(patsubst demo/%.c,$(BUILD)/demo/%,$(DEMO_SRC))
BENCH_BIN := $(patsubst bench/%.c,$(BUILD)/bench/%,$(BENCH_SRC))

.PHONY: all deps test test-deb asan demo bench test-gpu bench-gpu bench-torch install proto clean
# Keep intermediate objects between runs.
.SECONDARY:
all: $(VRAMD) $(LIBVRAM) $(VRAMCTL)

# ---- dependencies: install what is missing when root, else say how -----
DEPS_STAMP := $(BUILD)/.deps-ok
deps: $(DEPS_STAMP)
$(DEPS_STAMP):
	$(Q)./etc/install-deps.sh $(DEB_PKGS)
	$(Q)mkdir -p $(@D) && touch $@
.PHONY: deps-hip
deps-hip:
	$(Q)./etc/install-deps.sh $(DEB_PKGS_HIP)

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
	$(Q)cd proto && protoc-c --c_out=. vram.proto && \
		for f in vram.pb-c.c vram.pb-c.h; do \
			sed -i '1i /* SPDX-License-Identifier: Apache-2.0 */' $$f; done
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

# What tests/python/test_abi.py reads: vram.h's layouts, from the compiler.
LAYOUT := $(BUILD)/tests/vram_layout
$(LAYOUT): $(call obj,tests/python/vram_layout.c)
	$(call msg,LD,$@)
	$(Q)mkdir -p $(@D) && $(CC) $(LDFLAGS_ALL) -o $@ $^

# Shell cases (the runner's protocol): make install (a DESTDIR, a throwaway
# root), the packages' quick check, vramctl's completion, and vramd's log
# lines as the journal reads them.
# The benchmarks' selftest loads libvram into Python, as the Python tests
# do: not under a sanitizer (see PY_TESTS).
SYSTEM_TESTS := $(filter-out $(if $(SANITIZE),tests/system/bench_selftest_test), \
	$(wildcard tests/system/*_test))

test: all $(RUNNER) $(UNIT_BIN) $(INTEG_BIN) $(DEMO_BIN) $(LAYOUT) install-files
	$(Q)$(TEST_ENV) $(RUNNER) $(UNIT_BIN) $(INTEG_BIN) $(PY_TESTS) $(SYSTEM_TESTS)

# The Debian packages built, linted, installed and purged in a throwaway
# root (tests/system/deb_test; a minute or two). make test runs only its
# quick part.
test-deb: $(RUNNER)
	$(Q)./etc/install-deps.sh $(DEB_PKGS) $(DEB_PKGS_DEB)
	$(Q)$(TEST_ENV) VRAM_TEST_DEB=1 TEST_TIMEOUT=900 $(RUNNER) tests/system/deb_test

asan:
	$(Q)$(MAKE) --no-print-directory BUILD=build-asan CFLAGS='-O1 -g' \
		SANITIZE='-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all' test

# The restart chaos case of make test (6 rounds there), N rounds here.
.PHONY: chaos-restart test-systemd
chaos-restart: all $(BUILD)/tests/restart_test
	$(Q)$(TEST_ENV) VRAM_CHAOS_N=$(or $(N),100) \
		$(BUILD)/tests/restart_test --run chaos_sigkill_at_random_points

test-systemd: all
	$(Q)$(TEST_ENV) tests/system/systemd_run

test-gpu: all $(RUNNER) $(GPU_BIN)
	$(Q)$(TEST_ENV) $(RUNNER) $(GPU_BIN) tests/gpu/torch_test.py tests/gpu/tms_test.py \
		tests/gpu/multi_gpu_test.py

demo: all $(DEMO_BIN)
	$(Q)$(TEST_ENV) ./demo/run.sh

bench: all $(BENCH_BIN)
	$(Q)$(TEST_ENV) $(BUILD)/bench/rpc

bench-gpu: all $(BENCH_BIN)
	$(Q)$(TEST_ENV) ./bench/gpu.sh

bench-torch: all $(BUILD)/bench/gpu_raw
	$(Q)$(TEST_ENV) python3 bench/torch_bench.py

# ---- install --------------------------------------------------------------
# make install [PREFIX=/usr/local] [DESTDIR=]: the FHS places of either
# prefix. Under /usr the library goes to the multiarch directory and the
# units where Debian's systemd looks for packaged ones; under any other
# prefix everything stays below it, except the settings in SYSCONFDIR.
VERSION := $(shell sed -n 's/^.define VRAM_VERSION_STRING "\(.*\)"/\1/p' libvram/include/vram.h)
MULTIARCH := $(shell dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || $(CC) -print-multiarch 2>/dev/null)
is_usr = $(filter /usr,$(PREFIX))
BINDIR ?= $(PREFIX)/bin
LIBDIR ?= $(if $(is_usr),$(PREFIX)/lib/$(MULTIARCH),$(PREFIX)/lib)
INCLUDEDIR ?= $(PREFIX)/include
PKGCONFIGDIR ?= $(LIBDIR)/pkgconfig
DATADIR ?= $(PREFIX)/share
MANDIR ?= $(DATADIR)/man
SYSCONFDIR ?= /etc
# Debian 12 keeps packaged units in /lib (not yet merged into /usr/lib).
UNITDIR ?= $(if $(is_usr),$(or $(shell pkg-config --variable=systemdsystemunitdir systemd 2>/dev/null),/lib/systemd/system),$(PREFIX)/lib/systemd/system)
SYSUSERSDIR ?= $(if $(is_usr),/usr/lib/sysusers.d,$(PREFIX)/lib/sysusers.d)
TMPFILESDIR ?= $(if $(is_usr),/usr/lib/tmpfiles.d,$(PREFIX)/lib/tmpfiles.d)
COMPLETIONDIR ?= $(DATADIR)/bash-completion/completions
# The Python package goes where the system's python3 imports from: Debian's
# dist-packages, version-less under /usr, python3.X under /usr/local.
PYTHON ?= $(or $(wildcard /usr/bin/python3),python3)
PYVER := $(shell $(PYTHON) -c 'import sys; print("python%d.%d" % sys.version_info[:2])' 2>/dev/null)
PYTHONDIR ?= $(if $(is_usr),$(PREFIX)/lib/python3/dist-packages,$(PREFIX)/lib/$(PYVER)/dist-packages)
PY_DIST := vram-$(VERSION).dist-info

INST := $(BUILD)/install
# Installed programs find libvram through the loader's paths, never the
# build tree: vramctl is linked again without the build's rpath.
$(INST)/vramctl: $(call obj,$(VRAMCTL_SRC)) $(LIBVRAM)
	$(call msg,LD,$@)
	$(Q)mkdir -p $(@D) && $(CC) $(LDFLAGS_ALL) -o $@ $(call obj,$(VRAMCTL_SRC)) -L$(BUILD) -lvram

subst_paths = sed -e 's|@BINDIR@|$(BINDIR)|g' -e 's|@SYSCONFDIR@|$(SYSCONFDIR)|g' \
	-e 's|@PREFIX@|$(PREFIX)|g' -e 's|@LIBDIR@|$(LIBDIR)|g' \
	-e 's|@INCLUDEDIR@|$(INCLUDEDIR)|g' -e 's|@VERSION@|$(VERSION)|g'

# Generated for these paths: $(INST)/paths holds them and changes only when
# they do, so that a make install with another PREFIX regenerates them.
INST_PATHS := $(PREFIX) $(BINDIR) $(LIBDIR) $(INCLUDEDIR) $(SYSCONFDIR) $(VERSION)
.PHONY: install-paths-check
install-paths-check:
$(INST)/paths: install-paths-check
	$(Q)mkdir -p $(@D) && echo '$(INST_PATHS)' | cmp -s - $@ || \
		echo '$(INST_PATHS)' >$@
$(INST)/vramd.service: etc/vramd.service.in $(INST)/paths
	$(call msg,GEN,$@)
	$(Q)$(subst_paths) $< >$@
$(INST)/vram.pc: etc/vram.pc.in $(INST)/paths
	$(call msg,GEN,$@)
	$(Q)$(subst_paths) $< >$@
$(INST)/METADATA: python/pyproject.toml
	$(call msg,GEN,$@)
	$(Q)mkdir -p $(@D) && printf 'Metadata-Version: 2.1\nName: vram\nVersion: %s\nSummary: Python bindings of libvram, the vramd GPU memory broker'"'"'s client library\nLicense: Apache-2.0\nRequires-Python: >=3.8\n' $(VERSION) >$@

INSTALL_FILES := $(VRAMD) $(INST)/vramctl $(LIBVRAM) $(PRELOAD) \
	$(INST)/vramd.service $(INST)/vram.pc $(INST)/METADATA

.PHONY: install-files uninstall
install-files: $(INSTALL_FILES)

install: all $(INSTALL_FILES)
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(LIBDIR) $(DESTDIR)$(PKGCONFIGDIR) \
		$(DESTDIR)$(INCLUDEDIR) $(DESTDIR)$(UNITDIR) $(DESTDIR)$(SYSCONFDIR)/vramd \
		$(DESTDIR)$(SYSUSERSDIR) $(DESTDIR)$(TMPFILESDIR) $(DESTDIR)$(COMPLETIONDIR) \
		$(DESTDIR)$(MANDIR)/man1 $(DESTDIR)$(MANDIR)/man3 $(DESTDIR)$(MANDIR)/man5 \
		$(DESTDIR)$(MANDIR)/man8 $(DESTDIR)$(PYTHONDIR)/vram/compat \
		$(DESTDIR)$(PYTHONDIR)/$(PY_DIST)
	install -m 755 $(VRAMD) $(INST)/vramctl $(DESTDIR)$(BINDIR)/
	install -m 644 $(LIBVRAM) $(DESTDIR)$(LIBDIR)/libvram.so.$(VERSION)
	ln -sf libvram.so.$(VERSION) $(DESTDIR)$(LIBDIR)/libvram.so.0
	ln -sf libvram.so.0 $(DESTDIR)$(LIBDIR)/libvram.so
	@# A plugin for LD_PRELOAD, not a library to link: its own directory.
	install -d $(DESTDIR)$(LIBDIR)/vram
	install -m 644 $(PRELOAD) $(DESTDIR)$(LIBDIR)/vram/
	install -m 644 $(INST)/vram.pc $(DESTDIR)$(PKGCONFIGDIR)/
	install -m 644 libvram/include/vram.h libvram/preload/vram_preload.h \
		$(DESTDIR)$(INCLUDEDIR)/
	install -m 644 $(INST)/vramd.service etc/vramd.socket $(DESTDIR)$(UNITDIR)/
	install -m 644 etc/vramd.sysusers $(DESTDIR)$(SYSUSERSDIR)/vramd.conf
	install -m 644 etc/vramd.tmpfiles $(DESTDIR)$(TMPFILESDIR)/vramd.conf
	install -m 644 etc/vramctl.bash-completion $(DESTDIR)$(COMPLETIONDIR)/vramctl
	install -m 644 docs/vramctl.1 $(DESTDIR)$(MANDIR)/man1/
	install -m 644 docs/libvram.3 $(DESTDIR)$(MANDIR)/man3/
	install -m 644 docs/vramd.conf.5 $(DESTDIR)$(MANDIR)/man5/
	install -m 644 docs/vramd.8 $(DESTDIR)$(MANDIR)/man8/
	install -m 644 python/vram/*.py $(DESTDIR)$(PYTHONDIR)/vram/
	install -m 644 python/vram/compat/*.py $(DESTDIR)$(PYTHONDIR)/vram/compat/
	install -m 644 $(INST)/METADATA $(DESTDIR)$(PYTHONDIR)/$(PY_DIST)/
	printf '[vllm.general_plugins]\nvram = vram.compat.vllm:register\n' \
		>$(DESTDIR)$(PYTHONDIR)/$(PY_DIST)/entry_points.txt
	@# An edited config survives: the shipped one only where there is none.
	@if [ -e $(DESTDIR)$(SYSCONFDIR)/vramd/vramd.conf ]; then \
		echo "keeping $(DESTDIR)$(SYSCONFDIR)/vramd/vramd.conf (defaults: vramd.conf(5))"; \
	else \
		echo "install -m 644 etc/vramd.conf $(DESTDIR)$(SYSCONFDIR)/vramd/"; \
		install -m 644 etc/vramd.conf $(DESTDIR)$(SYSCONFDIR)/vramd/; \
	fi
	@# The live system: the loader's cache, the group, systemd's view.
	@if [ -z "$(DESTDIR)" ]; then \
		echo ldconfig; ldconfig; \
		if command -v systemd-sysusers >/dev/null; then \
			echo "systemd-sysusers $(SYSUSERSDIR)/vramd.conf"; \
			systemd-sysusers $(SYSUSERSDIR)/vramd.conf; \
		elif ! getent group vram >/dev/null; then \
			echo "groupadd --system vram"; groupadd --system vram; \
		fi; \
		if [ -d /run/systemd/system ]; then \
			echo "systemctl daemon-reload"; systemctl daemon-reload; \
		fi; \
	fi

# Removes what install put there. The settings go only if unchanged, and
# the group stays (files may belong to it).
uninstall:
	rm -f $(DESTDIR)$(BINDIR)/vramd $(DESTDIR)$(BINDIR)/vramctl \
		$(DESTDIR)$(LIBDIR)/libvram.so.$(VERSION) $(DESTDIR)$(LIBDIR)/libvram.so.0 \
		$(DESTDIR)$(LIBDIR)/libvram.so $(DESTDIR)$(PKGCONFIGDIR)/vram.pc \
		$(DESTDIR)$(INCLUDEDIR)/vram.h $(DESTDIR)$(INCLUDEDIR)/vram_preload.h \
		$(DESTDIR)$(LIBDIR)/vram/libvram-preload.so $(DESTDIR)$(UNITDIR)/vramd.service \
		$(DESTDIR)$(UNITDIR)/vramd.socket $(DESTDIR)$(SYSUSERSDIR)/vramd.conf \
		$(DESTDIR)$(TMPFILESDIR)/vramd.conf $(DESTDIR)$(COMPLETIONDIR)/vramctl \
		$(DESTDIR)$(MANDIR)/man1/vramctl.1 $(DESTDIR)$(MANDIR)/man3/libvram.3 \
		$(DESTDIR)$(MANDIR)/man5/vramd.conf.5 $(DESTDIR)$(MANDIR)/man8/vramd.8
	rmdir $(DESTDIR)$(LIBDIR)/vram 2>/dev/null || true
	rm -rf $(DESTDIR)$(PYTHONDIR)/vram $(DESTDIR)$(PYTHONDIR)/$(PY_DIST)
	@if cmp -s etc/vramd.conf $(DESTDIR)$(SYSCONFDIR)/vramd/vramd.conf; then \
		echo "rm $(DESTDIR)$(SYSCONFDIR)/vramd/vramd.conf"; \
		rm -f $(DESTDIR)$(SYSCONFDIR)/vramd/vramd.conf; \
		rmdir $(DESTDIR)$(SYSCONFDIR)/vramd 2>/dev/null || true; \
	elif [ -e $(DESTDIR)$(SYSCONFDIR)/vramd/vramd.conf ]; then \
		echo "keeping the edited $(DESTDIR)$(SYSCONFDIR)/vramd/vramd.conf"; \
	fi
	@if [ -z "$(DESTDIR)" ]; then \
		echo ldconfig; ldconfig; \
		if [ -d /run/systemd/system ]; then \
			echo "systemctl daemon-reload"; systemctl daemon-reload; \
		fi; \
	fi

clean:
	rm -rf build build-asan

# ---- libvram-preload.so: whole-process capture (docs/preload.md) ----------
# A product of its own over libvram's public API: compiled with the public
# header only, exporting just the runtime calls it replaces and its
# vram_preload_* entry points. Tested by tests/integration/preload_test.c
# through a program linked against a fake CUDA runtime.
PRELOAD_SRC := $(wildcard libvram/preload/*.c)
PRELOAD_OBJ := $(call obj,$(PRELOAD_SRC))
PRELOAD_INC := $(PUBLIC_INC) -Icommon -Ilibvram/preload
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
# ---- bench-compare: vramd against upstream torch_memory_saver --------------
# bench/compare.py (issue 11): every workload through upstream
# torch_memory_saver (built by tools/tms-build.sh into .tms/, or $TMS_DIR),
# upstream with retain_cpu_backup, vramd's compat layer and an in-process
# floor. Needs a GPU and PyTorch (without, it says so and make goes on:
# the script itself exits 77). COMPARE_ARGS go to
# bench/compare.py (e.g. COMPARE_ARGS='--sweeps none'). The selftest runs
# without a GPU.
.PHONY: bench-compare bench-compare-selftest
bench-compare: all
	$(Q)$(TEST_ENV) python3 bench/compare.py $(COMPARE_ARGS); rc=$$?; \
		[ $$rc -eq 77 ] || exit $$rc

bench-compare-selftest: all
	$(Q)$(TEST_ENV) python3 bench/compare_selftest.py

# ---- container images (etc/container/; docs/kubernetes.md) -----------------
# Builds vramd's image and a client image from the project's .debs
# (dpkg-buildpackage -us -uc -b puts them in CONTAINER_DEBS) and tries them.
# Not part of `make test`: it needs podman (or buildah, docker) and minutes.
CONTAINER_DEBS ?= ..
CONTAINER_TOOL ?= podman
.PHONY: container
container:
	etc/container/build-image.sh -d $(CONTAINER_DEBS) -t $(CONTAINER_TOOL)

# ---- fuzzing (tests/fuzz/, clang's libFuzzer, ASan + UBSan) ----------------
# make fuzz [N | Ns] [JOBS=k]: N executions per target in all (default
# 10000000), or N seconds with an s (make fuzz 600s), on k workers
# (libFuzzer's -jobs=k -workers=k; FUZZ_JOBS=k too, default 1), over the
# corpus in $(BUILD)/fuzz/corpus-TARGET (seeded from tests/fuzz/corpus/).
# tests/fuzz/run.sh runs them and prints a line of totals per target
# (`fuzz daemon: N execs, k workers, R/s, C crashes, ...`); logs and
# findings go to $(BUILD)/fuzz/run/. tools/gpu-prepare.sh fuzz runs the
# same binaries on a machine without make or clang.
# make test runs a short bounded run (tests/system/fuzz_test) when clang is
# there, and builds the target then.
FUZZ_CC ?= clang
HAVE_FUZZ_CC := $(shell command -v $(FUZZ_CC) 2>/dev/null)
FUZZ_FLAGS := -std=gnu11 -D_GNU_SOURCE -g -O1 -fno-omit-frame-pointer \
	-fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all
# libFuzzer is C++: its libstdc++ goes into the binary, so that a machine
# with an older libstdc++ (or none) runs the targets (tools/gpu-prepare.sh
# fuzz); clang links the sanitizer and fuzzer runtimes statically anyway.
FUZZ_LDFLAGS := -static-libstdc++ -static-libgcc
FUZZ_DAEMON := $(BUILD)/fuzz/daemon_fuzz
$(FUZZ_DAEMON): tests/fuzz/daemon_fuzz.c tests/fuzz/fuzz_fds.h $(DAEMON_SRC) $(PROTO_SRC) proto/vram.pb-c.h
	$(call msg,FUZZ,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(FUZZ_CC) $(FUZZ_FLAGS) $(DAEMON_INC) $(PKG_CFLAGS) -o $@ \
		$(filter %.c,$^) $(FUZZ_LDFLAGS) $(PKG_LIBS_DAEMON) -ldl -lm -lpthread
FUZZ_CLIENT := $(BUILD)/fuzz/client_fuzz
$(FUZZ_CLIENT): tests/fuzz/client_fuzz.c tests/fuzz/fuzz_fds.h $(CLIENT_SRC) $(PROTO_SRC) proto/vram.pb-c.h
	$(call msg,FUZZ,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(FUZZ_CC) $(FUZZ_FLAGS) $(LIBVRAM_INC) $(PKG_CFLAGS) -o $@ \
		$(filter %.c,$^) $(FUZZ_LDFLAGS) $(PKG_LIBS_CLIENT) -ldl -lm -lpthread
test: $(if $(HAVE_FUZZ_CC),$(FUZZ_DAEMON) $(FUZZ_CLIENT))

ifneq ($(filter fuzz chaos,$(firstword $(MAKECMDGOALS))),)
FUZZ_ARG := $(word 2,$(MAKECMDGOALS))
ifneq ($(FUZZ_ARG),)
$(eval $(FUZZ_ARG):;@:)
endif
endif
FUZZ_JOBS ?= $(or $(JOBS),1)
.PHONY: fuzz
fuzz: $(FUZZ_DAEMON) $(FUZZ_CLIENT)
	$(Q)tests/fuzz/run.sh -b $(BUILD) -j $(FUZZ_JOBS) \
		$(if $(filter %s,$(FUZZ_ARG)),-t $(patsubst %s,%,$(FUZZ_ARG)),-n $(or $(FUZZ_ARG),10000000))

# make chaos [N]: tests/integration/chaos_test.c with N rounds (default
# 1000) of random SIGKILLs of owners, pausers and trainers; it prints its
# counts. make test runs 40 rounds.
.PHONY: chaos
chaos: all $(RUNNER) $(BUILD)/tests/chaos_test
	$(Q)$(TEST_ENV) CHAOS_ROUNDS=$(or $(FUZZ_ARG),1000) TEST_TIMEOUT=3600 \
		$(BUILD)/tests/chaos_test random_kills_lose_nothing
