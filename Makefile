# vramd build.
#
#   make            build everything into build/ (bin/, lib/, tests/)
#   make SAN=1      the same with AddressSanitizer + UndefinedBehaviorSanitizer, into build-san/
#   make deps       install the missing Debian packages of DEPS=build|demo|test|bench (test)
#   make test       the test set of packages, strict build, every test; then under ASan+UBSan
#   make demo       the build and demo sets only, build, run the main scenario on a simulated GPU
#   make install    vramd, vramctl, the simulator, man pages, completions, the unit and an
#                   example config under DESTDIR/PREFIX (mk/install.mk); make uninstall
#   make chaos      10,000 chaos requests (REQUESTS=N), JSON result in bench/results/
#   make soak       ten minutes at twice capacity (MINUTES=N), JSON result in bench/results/
#   make fuzz       libFuzzer binaries (clang) into build-fuzz/
#   make man        man/*.[158] from docs/config.md and the binaries' help (mk/gen_man.py)
#   make lint       cppcheck over src/ and sim/; function and file length, layering (mk/); function length (mk/lint_funclen.py);
#                   cycles and layering of src/ (mk/lint_layers.py, ranks in mk/layers.txt);
#                   docs/design.md's Modules table, event table and folder arrows (mk/lint_design.py),
#                   and its Module state census (mk/lint_state.py)
#                   the GPU ledger written only by src/sched/ (mk/lint_ledger.py)
#
# Every .c file under src/ except the binaries' mains goes into build/libvramd.a; binaries,
# unit tests and fuzz replayers link against it. New modules need no Makefile change.

SAN ?= 0
# A plain `make` builds on every core (as `make -jN` would); an explicit -j wins.
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
ifeq ($(filter -j%,$(MAKEFLAGS)),)
MAKEFLAGS += -j$(JOBS)
endif
ifeq ($(SAN),1)
BUILD ?= build-san
SANFLAGS = -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined -DVRAMD_DEBUG
OPT = -O1
else
BUILD ?= build
SANFLAGS =
OPT = -O2
endif

CC ?= cc
# `make V=1` shows the full commands; by default one short line per target
V ?= 0
ifeq ($(V),1)
Q =
else
Q = @
endif
PKGS = libuv libcjson yaml-0.1 sqlite3 libsystemd libpq
PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS := $(shell pkg-config --libs $(PKGS) 2>/dev/null)

# -Wno-format-truncation: every snprintf into a fixed buffer truncates on purpose (bounded
# log lines, error messages); gcc's guess that it might is not a defect.
CFLAGS_COMMON = -std=c11 -D_GNU_SOURCE -g $(OPT) -fPIC -pthread \
	-Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wmissing-prototypes \
	-Wno-unused-parameter -Wno-format-truncation -Isrc -Isim/lib $(PKG_CFLAGS) $(SANFLAGS) $(CPPFLAGS)
CFLAGS ?=
override CFLAGS := $(CFLAGS_COMMON) $(CFLAGS)
LDFLAGS_COMMON = -pthread $(SANFLAGS) $(LDFLAGS)
LIBS = $(PKG_LIBS) -lrt -lm

LIB_SRCS := $(filter-out src/daemon/main.c src/cli/%,$(shell find src -name '*.c' | sort))
LIB_OBJS := $(LIB_SRCS:%.c=$(BUILD)/obj/%.o)
SIMLIB_SRCS := $(wildcard sim/lib/*.c)
SIMLIB_OBJS := $(SIMLIB_SRCS:%.c=$(BUILD)/obj/%.o)
NVMLSIM_SRCS := $(wildcard sim/nvml/*.c)
NVMLSIM_OBJS := $(NVMLSIM_SRCS:%.c=$(BUILD)/obj/%.o)
CUDASIM_SRCS := $(wildcard sim/cuda/*.c)
CUDASIM_OBJS := $(CUDASIM_SRCS:%.c=$(BUILD)/obj/%.o)
CUDACKPT_SRCS := $(wildcard sim/cudackpt/*.c)
SIMGPU_SRCS := $(wildcard sim/simgpu/*.c)
SIMWORKER_SRCS := $(wildcard sim/worker/*.c)
CLI_SRCS := $(wildcard src/cli/*.c)
UNIT_SRCS := $(wildcard tests/unit/test_*.c)
UNIT_BINS := $(UNIT_SRCS:tests/unit/%.c=$(BUILD)/tests/%)
FUZZ_SRCS := $(wildcard tests/fuzz/fuzz_*.c)
REPLAY_BINS := $(FUZZ_SRCS:tests/fuzz/fuzz_%.c=$(BUILD)/tests/replay_%)
BENCH_SRCS := $(wildcard bench/*/*.c)
BENCH_BINS := $(foreach f,$(BENCH_SRCS),$(BUILD)/bench/$(basename $(notdir $(f))))
TESTHELPER_SRCS := $(wildcard tests/helpers/*.c)
TESTHELPER_BINS := $(TESTHELPER_SRCS:tests/helpers/%.c=$(BUILD)/tests/%)
# LD_PRELOAD shims for tests (tests/preload/NAME.c -> $(BUILD)/tests/NAME.so)
PRELOAD_SRCS := $(wildcard tests/preload/*.c)
PRELOAD_LIBS := $(PRELOAD_SRCS:tests/preload/%.c=$(BUILD)/tests/%.so)

BINS = $(BUILD)/bin/vramd
ifneq ($(CLI_SRCS),)
BINS += $(BUILD)/bin/vramctl
endif
ifneq ($(SIMGPU_SRCS),)
BINS += $(BUILD)/bin/simgpu
endif
ifneq ($(SIMWORKER_SRCS),)
BINS += $(BUILD)/bin/simworker
endif
ifneq ($(NVMLSIM_SRCS),)
BINS += $(BUILD)/lib/libnvidia-ml-sim.so
endif
ifneq ($(CUDASIM_SRCS),)
BINS += $(BUILD)/lib/libcuda-sim.so
endif
SHIM_SRCS := $(wildcard shim/*.c)
ifneq ($(SHIM_SRCS),)
BINS += $(BUILD)/lib/libvramd-cuda.so
endif
ifneq ($(CUDACKPT_SRCS),)
BINS += $(BUILD)/bin/simcuda-checkpoint
endif

.PHONY: all deps test demo fuzz lint clean check-build chaos soak install uninstall man
all: $(BINS) $(UNIT_BINS) $(REPLAY_BINS) $(TESTHELPER_BINS) $(PRELOAD_LIBS) $(BENCH_BINS)

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	@echo "  CC   $<"
	$(Q)$(CC) $(CFLAGS) -MMD -MP -c $< -o $@

# The status page (GET /) is embedded into page.o by the assembler's .incbin directive,
# with a path relative to the repository root (see src/obs/page.c); the compiler's -MMD
# does not see it, so this line makes an edit of page.html rebuild page.o.
$(BUILD)/obj/src/obs/page.o: src/obs/page.html

$(BUILD)/libvramd.a: $(LIB_OBJS)
	@mkdir -p $(dir $@)
	@echo "  AR   $@"
	$(Q)rm -f $@ && ar rcs $@ $^

$(BUILD)/libsimgpu.a: $(SIMLIB_OBJS)
	@mkdir -p $(dir $@)
	@echo "  AR   $@"
	$(Q)rm -f $@ && ar rcs $@ $^

$(BUILD)/bin/vramd: $(BUILD)/obj/src/daemon/main.o $(BUILD)/libvramd.a
	@mkdir -p $(dir $@)
	@echo "  LD   $@"
	$(Q)$(CC) $(LDFLAGS_COMMON) -o $@ $^ $(LIBS)

$(BUILD)/bin/vramctl: $(CLI_SRCS:%.c=$(BUILD)/obj/%.o) $(BUILD)/libvramd.a
	@mkdir -p $(dir $@)
	@echo "  LD   $@"
	$(Q)$(CC) $(LDFLAGS_COMMON) -o $@ $^ $(LIBS)

$(BUILD)/bin/simgpu: $(SIMGPU_SRCS:%.c=$(BUILD)/obj/%.o) $(BUILD)/libsimgpu.a $(BUILD)/libvramd.a
	@mkdir -p $(dir $@)
	@echo "  LD   $@"
	$(Q)$(CC) $(LDFLAGS_COMMON) -o $@ $^ $(LIBS)

$(BUILD)/bin/simworker: $(SIMWORKER_SRCS:%.c=$(BUILD)/obj/%.o) $(BUILD)/libsimgpu.a $(BUILD)/libvramd.a
	@mkdir -p $(dir $@)
	@echo "  LD   $@"
	$(Q)$(CC) $(LDFLAGS_COMMON) -o $@ $^ $(LIBS)

# The simulated NVML library is loaded by dlopen into vramd (and into probes); it must not
# drag in the sanitizer runtime on its own, so it links only the sim library objects.
$(BUILD)/lib/libnvidia-ml-sim.so: $(NVMLSIM_OBJS) $(SIMLIB_OBJS)
	@mkdir -p $(dir $@)
	@echo "  LD   $@"
	$(Q)$(CC) -shared -Wl,-soname,libnvidia-ml.so.1 -Wl,--version-script=sim/nvml/exports.map \
		$(LDFLAGS_COMMON) -o $@ $^ -lrt -pthread

# The simulated CUDA driver (checkpoint calls), the same way: loaded by dlopen into vramd and
# simcuda-checkpoint. -Bsymbolic-functions: its own references (cuGetProcAddress's table) bind
# to its own functions, as the real driver's do, never to a preloaded shim's of the same name.
$(BUILD)/lib/libcuda-sim.so: $(CUDASIM_OBJS) $(SIMLIB_OBJS)
	@mkdir -p $(dir $@)
	@echo "  LD   $@"
	$(Q)$(CC) -shared -Wl,-soname,libcuda.so.1 -Wl,-Bsymbolic-functions -Wl,--version-script=sim/cuda/exports.map \
		$(LDFLAGS_COMMON) -o $@ $^ -lrt -pthread

# The CUDA shim (shim/, docs/shim.md), LD_PRELOADed into workers by vramd: built without
# $(SANFLAGS) like the preload shims below (it goes into sanitized and plain workers alike),
# exporting only what it interposes.
$(BUILD)/lib/libvramd-cuda.so: $(SHIM_SRCS) $(wildcard shim/*.h) shim/exports.map src/gpu/shim_abi.h
	@mkdir -p $(dir $@)
	@echo "  LD   $@"
	$(Q)$(CC) -std=c11 -D_GNU_SOURCE -g -O2 -fPIC -pthread -Wall -Wextra -Werror -Wshadow \
		-Wno-unused-parameter -Isrc -shared -Wl,--version-script=shim/exports.map -o $@ $(SHIM_SRCS) -ldl

# A cuda-checkpoint compatible CLI over src/gpu/cuda.c (dlopens libcuda-sim.so or the driver).
$(BUILD)/bin/simcuda-checkpoint: $(CUDACKPT_SRCS:%.c=$(BUILD)/obj/%.o) $(BUILD)/libvramd.a
	@mkdir -p $(dir $@)
	@echo "  LD   $@"
	$(Q)$(CC) $(LDFLAGS_COMMON) -o $@ $^ $(LIBS) -ldl

$(BUILD)/tests/test_%: tests/unit/test_%.c $(BUILD)/libvramd.a $(BUILD)/libsimgpu.a
	@mkdir -p $(dir $@)
	@echo "  LD   $@"
	$(Q)$(CC) $(CFLAGS) -Itests/unit -o $@ $< $(BUILD)/libvramd.a $(BUILD)/libsimgpu.a \
		$(LDFLAGS_COMMON) $(LIBS) -lcmocka -ldl

# Unit tests that #include a vramctl source (the CLI is not in libvramd.a) rebuild with it.
$(BUILD)/tests/test_cli_render: src/cli/cli_render.c src/cli/cli_render.h
$(BUILD)/tests/test_cli_http: src/cli/cli_http.c src/cli/cli_http.h src/cli/cli.h
# The shim's bookkeeping and its page client are compiled into their unit tests (the shim is not in libvramd.a).
$(BUILD)/tests/test_shim_book: shim/shim_book.c shim/shim_book.h
$(BUILD)/tests/test_shim_slots: shim/shim_client.c shim/shim_client.h
# Unit tests that share a header of test helpers rebuild when it changes.
$(BUILD)/tests/test_validate $(BUILD)/tests/test_validate_mesh: tests/unit/validate_test_util.h
$(BUILD)/tests/test_process $(BUILD)/tests/test_process_child: tests/unit/process_test_util.h
$(BUILD)/tests/test_config_model $(BUILD)/tests/test_config_top $(BUILD)/tests/test_config_errors \
	$(BUILD)/tests/test_config_park $(BUILD)/tests/test_config_limits $(BUILD)/tests/test_config_fleet \
	$(BUILD)/tests/test_config_turns \
	$(BUILD)/tests/test_preset_table: \
	tests/unit/config_test.h
$(BUILD)/tests/test_journal $(BUILD)/tests/test_journal_store $(BUILD)/tests/test_jstore_sqlite: tests/unit/journal_fixture.h
$(BUILD)/tests/test_request_path $(BUILD)/tests/test_request_path_queue $(BUILD)/tests/test_request_head: tests/unit/path_fixture.h \
	tests/unit/path_upstream.h

$(BUILD)/tests/replay_%: tests/fuzz/fuzz_%.c tests/fuzz/replay_main.c $(BUILD)/libvramd.a
	@mkdir -p $(dir $@)
	@echo "  LD   $@"
	$(Q)$(CC) $(CFLAGS) -o $@ $^ $(LDFLAGS_COMMON) $(LIBS)

$(BUILD)/tests/%: tests/helpers/%.c $(BUILD)/libvramd.a $(BUILD)/libsimgpu.a
	@mkdir -p $(dir $@)
	@echo "  LD   $@"
	$(Q)$(CC) $(CFLAGS) -o $@ $< $(BUILD)/libvramd.a $(BUILD)/libsimgpu.a $(LDFLAGS_COMMON) $(LIBS) -ldl

# A preload shim is loaded into vramd in both builds: like the NVML simulation it must not
# drag in the sanitizer runtime, so it gets the warnings but not $(SANFLAGS).
$(BUILD)/tests/%.so: tests/preload/%.c
	@mkdir -p $(dir $@)
	@echo "  LD   $@"
	$(Q)$(CC) -std=c11 -D_GNU_SOURCE -g -O2 -fPIC -shared -Wall -Wextra -Werror -Wshadow \
		-Wstrict-prototypes -Wmissing-prototypes -o $@ $< -ldl -pthread

$(BUILD)/bench/%: $(BUILD)/libvramd.a $(BENCH_SRCS)
	@mkdir -p $(dir $@)
	@echo "  LD   $@"
	$(Q)$(CC) $(CFLAGS) -o $@ $(filter %/$*.c,$(BENCH_SRCS)) $(BUILD)/libvramd.a $(LDFLAGS_COMMON) $(LIBS)

DEPS ?= test
deps:
	@sh mk/deps.sh $(DEPS)

# The man pages are generated (docs/config.md, vramctl's and vramd's --help) and committed;
# tests/ops/test_man_pages.py fails when they are out of step.
man: $(BUILD)/bin/vramd $(BUILD)/bin/vramctl
	@/usr/bin/python3 mk/gen_man.py --build $(BUILD)

test:
	@sh mk/deps.sh test
	@$(MAKE) --no-print-directory -j$(JOBS) all
	@$(MAKE) --no-print-directory lint
	@$(MAKE) --no-print-directory -j$(JOBS) SAN=1 all
	@/usr/bin/python3 tests/run_tests.py --build build --san-build build-san

demo:
	@sh mk/deps.sh demo
	@$(MAKE) --no-print-directory -j$(JOBS) all
	@/usr/bin/python3 examples/demo.py --build build

# The long reliability runs (docs/reliability.md), each writing its JSON result under
# bench/results/: 10,000 chaos requests (RELIABILITY case 14), ten minutes at twice the
# measured capacity (case 34). Not part of `make test`; BUILD=build-san runs them under
# the sanitizers.
chaos: all
	@VRAMD_BUILD=$(BUILD) /usr/bin/python3 tests/chaos/chaos.py --requests $(or $(REQUESTS),10000)
soak: all
	@VRAMD_BUILD=$(BUILD) /usr/bin/python3 tests/soak/soak.py --minutes $(or $(MINUTES),10)

# Each fuzzer links only the sources it exercises: FUZZ_DEPS_<name> (the .c files; headers
# listed there only trigger rebuilds), plus the libraries in FUZZ_LIBS_<name>. A fuzzer
# without such a line gets the whole library.
FUZZ_BUILD = build-fuzz
FUZZ_DEPS_fuzz_http1 = src/http/http1.c src/http/http1_chunked.c src/http/http1.h src/http/http1_internal.h
FUZZ_DEPS_fuzz_degrade = src/quality/degrade_detect.c src/quality/degrade_rewrite.c src/quality/oom_message.c src/common/json_util.c \
	src/common/buf.c src/quality/degrade.h src/quality/degrade_int.h src/quality/oom_message.h src/common/json_util.h src/common/buf.h \
	src/config/config.h
FUZZ_LIBS_fuzz_degrade = -lcjson
FUZZ_DEPS_fuzz_validate = src/quality/validate.c src/quality/validate_json.c src/quality/validate_glb.c \
	src/quality/validate_ply.c src/quality/validate_png.c src/quality/validate.h src/quality/validate_int.h
FUZZ_LIBS_fuzz_validate = -lcjson
FUZZ_DEPS_fuzz_journal_cursor = src/jobstore/journal_cursor.c src/jobstore/journal.h
FUZZ_DEPS_fuzz_job_request = src/jobstore/job_request.c src/common/units.c src/http/http_path.c src/jobstore/job_request.h src/common/units.h
FUZZ_LIBS_fuzz_job_request = -lcjson
FUZZ_DEPS_fuzz_agent_line = src/fleet/agent_line.c src/fleet/agent_line.h
FUZZ_DEPS_fuzz_grant_socket = src/net/grant_socket.c src/net/grant_socket.h src/gpu/shim_abi.h
FUZZ_LIBS_fuzz_grant_socket = -luv
# fuzz_conn and fuzz_upstream drive an in-process daemon (tests/fuzz/fuzz_daemon.h) and link
# the whole library; they are built with VRAMD_DEBUG so a CHECK_IF aborts (a finding).
FUZZ_CFLAGS_fuzz_conn = -DVRAMD_DEBUG
FUZZ_CFLAGS_fuzz_upstream = -DVRAMD_DEBUG
$(FUZZ_BUILD)/fuzz_conn $(FUZZ_BUILD)/fuzz_upstream: tests/fuzz/fuzz_daemon.h
$(BUILD)/tests/replay_conn $(BUILD)/tests/replay_upstream: tests/fuzz/fuzz_daemon.h
FUZZ_NAMES := $(FUZZ_SRCS:tests/fuzz/%.c=%)
FUZZ_CFLAGS = -std=c11 -D_GNU_SOURCE -g -O1 -Isrc -Isim/lib $(PKG_CFLAGS) \
	-fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
define FUZZ_RULE
$(FUZZ_BUILD)/$(1): tests/fuzz/$(1).c $(or $(FUZZ_DEPS_$(1)),$(LIB_SRCS))
	@mkdir -p $(FUZZ_BUILD)
	clang $(FUZZ_CFLAGS) $(FUZZ_CFLAGS_$(1)) -o $$@ $$(filter %.c,$$^) $(if $(FUZZ_DEPS_$(1)),$(FUZZ_LIBS_$(1)),$(PKG_LIBS) -lrt -lm)
endef
$(foreach n,$(FUZZ_NAMES),$(eval $(call FUZZ_RULE,$(n))))
fuzz: $(FUZZ_NAMES:%=$(FUZZ_BUILD)/%)

lint:
	@echo "  LINT src sim shim (cppcheck)"
	$(Q)cppcheck --quiet --error-exitcode=1 --enable=warning,performance,portability \
	  --inline-suppr --suppress=missingIncludeSystem -D__GNUC__ -Isrc -Isim/lib src sim shim
	@echo "  LINT src shim sim (function length), src (file length, layers; universal-ctags), docs/design.md (Modules, events, arrows, Module state), ledger writers"
	$(Q)rc=0; /usr/bin/python3 mk/lint_funclen.py || rc=1; \
	  /usr/bin/python3 mk/lint_layers.py || rc=1; \
	  /usr/bin/python3 mk/test_lint_layers.py >/dev/null 2>&1 || { echo "lint: the checkers' self-test failed (mk/test_lint_layers.py -v)"; rc=1; }; \
	  /usr/bin/python3 mk/lint_design.py || rc=1; \
	  /usr/bin/python3 mk/test_lint_design.py >/dev/null 2>&1 || { echo "lint: the design lint's self-test failed (mk/test_lint_design.py -v)"; rc=1; }; \
	  /usr/bin/python3 mk/lint_state.py || rc=1; \
	  /usr/bin/python3 mk/test_lint_state.py >/dev/null 2>&1 || { echo "lint: the state lint's self-test failed (mk/test_lint_state.py -v)"; rc=1; }; \
	  /usr/bin/python3 mk/lint_ledger.py || rc=1; \
	  /usr/bin/python3 mk/test_lint_ledger.py >/dev/null 2>&1 || { echo "lint: the ledger lint's self-test failed (mk/test_lint_ledger.py -v)"; rc=1; }; \
	  exit $$rc

clean:
	rm -rf build build-san build-fuzz

include mk/install.mk

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)
