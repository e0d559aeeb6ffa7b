# make install / make uninstall (included by the Makefile; docs/packaging.md says what goes where).
#
#   make install [PREFIX=/usr/local] [DESTDIR=/tmp/root]
#   make uninstall [PREFIX=...] [DESTDIR=...]   removes exactly what install put there
#
# Installs what `make` built in $(BUILD) (run `make` first; install builds nothing, so that
# `sudo make install` writes no root-owned files into build/):
#   $(BINDIR)            vramd, vramctl
#   $(PKGLIBDIR)         the GPU simulator: simgpu, simworker, simcuda-checkpoint,
#                        libnvidia-ml-sim.so, libcuda-sim.so (private: not on PATH, not in
#                        the linker's path; point gpu.nvml_library at it to use it)
#   $(PKGLIBDIR)         libvramd-cuda.so, the CUDA shim vramd puts into its workers'
#                        LD_PRELOAD (docs/shim.md; vramd finds it at ../lib/vramd/ from its binary)
#   $(MANDIR)/manN       man/*.1 man/*.5 man/*.8, those that exist
#   $(BASHCOMPDIR)       contrib/completions/vramctl.bash as vramctl, when it exists
#   $(ZSHCOMPDIR)        contrib/completions/_vramctl, when it exists
#   $(UNITDIR)           vramd.service, ExecStart= pointing at $(BINDIR)/vramd
#   $(EXAMPLEDIR)        vramd.yaml (contrib/vramd.yaml: a model server behind vramd) and
#                        vramd-minimal.yaml (no models: what the Debian package puts in /etc)
#   $(DOCDIR)            README.md and docs/*.md
# Nothing goes into /etc: the unit reads /etc/vramd/vramd.yaml, which the administrator
# writes (from $(EXAMPLEDIR)); uninstall leaves /etc/vramd and /var/lib/vramd alone.

PREFIX ?= /usr/local
DESTDIR ?=
BINDIR ?= $(PREFIX)/bin
PKGLIBDIR ?= $(PREFIX)/lib/vramd
DATADIR ?= $(PREFIX)/share
MANDIR ?= $(DATADIR)/man
DOCDIR ?= $(DATADIR)/doc/vramd
EXAMPLEDIR ?= $(DOCDIR)/examples
BASHCOMPDIR ?= $(DATADIR)/bash-completion/completions
ZSHCOMPDIR ?= $(DATADIR)/zsh/site-functions
UNITDIR ?= $(PREFIX)/lib/systemd/system
INSTALL ?= install

INSTALL_BINS := vramd vramctl
INSTALL_SIM_BINS := simgpu simworker simcuda-checkpoint
INSTALL_SIM_LIBS := libnvidia-ml-sim.so libcuda-sim.so
INSTALL_LIBS := libvramd-cuda.so
INSTALL_MANS := $(wildcard man/*.1 man/*.5 man/*.8)
INSTALL_DOCS := README.md $(wildcard docs/*.md)

install:
	@for f in $(INSTALL_BINS:%=$(BUILD)/bin/%) $(INSTALL_SIM_BINS:%=$(BUILD)/bin/%) $(INSTALL_SIM_LIBS:%=$(BUILD)/lib/%) \
	  $(INSTALL_LIBS:%=$(BUILD)/lib/%); do \
	  [ -f "$$f" ] || { echo "install: $$f is missing: run make first" >&2; exit 1; }; done
	$(INSTALL) -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(PKGLIBDIR) $(DESTDIR)$(UNITDIR) \
	  $(DESTDIR)$(EXAMPLEDIR) $(DESTDIR)$(DOCDIR)
	$(INSTALL) -m 0755 $(INSTALL_BINS:%=$(BUILD)/bin/%) $(DESTDIR)$(BINDIR)/
	$(INSTALL) -m 0755 $(INSTALL_SIM_BINS:%=$(BUILD)/bin/%) $(DESTDIR)$(PKGLIBDIR)/
	$(INSTALL) -m 0644 $(INSTALL_SIM_LIBS:%=$(BUILD)/lib/%) $(DESTDIR)$(PKGLIBDIR)/
	$(INSTALL) -m 0644 $(INSTALL_LIBS:%=$(BUILD)/lib/%) $(DESTDIR)$(PKGLIBDIR)/
	sed -e 's|/usr/local/bin/vramd|$(BINDIR)/vramd|g' \
	    -e 's|file:///usr/local/share/doc/vramd/|file://$(DOCDIR)/|g' \
	    contrib/vramd.service > $(DESTDIR)$(UNITDIR)/vramd.service
	chmod 0644 $(DESTDIR)$(UNITDIR)/vramd.service
	$(INSTALL) -m 0644 contrib/vramd.yaml $(DESTDIR)$(EXAMPLEDIR)/vramd.yaml
	$(INSTALL) -m 0644 contrib/vramd-minimal.yaml $(DESTDIR)$(EXAMPLEDIR)/vramd-minimal.yaml
	$(INSTALL) -m 0644 $(INSTALL_DOCS) $(DESTDIR)$(DOCDIR)/
	@set -e; for m in $(INSTALL_MANS); do \
	  s=$${m##*.}; $(INSTALL) -d $(DESTDIR)$(MANDIR)/man$$s; \
	  echo "$(INSTALL) -m 0644 $$m $(DESTDIR)$(MANDIR)/man$$s/"; \
	  $(INSTALL) -m 0644 $$m $(DESTDIR)$(MANDIR)/man$$s/; done
	@set -e; if [ -f contrib/completions/vramctl.bash ]; then \
	  $(INSTALL) -d $(DESTDIR)$(BASHCOMPDIR); \
	  echo "$(INSTALL) -m 0644 contrib/completions/vramctl.bash $(DESTDIR)$(BASHCOMPDIR)/vramctl"; \
	  $(INSTALL) -m 0644 contrib/completions/vramctl.bash $(DESTDIR)$(BASHCOMPDIR)/vramctl; fi
	@set -e; if [ -f contrib/completions/_vramctl ]; then \
	  $(INSTALL) -d $(DESTDIR)$(ZSHCOMPDIR); \
	  echo "$(INSTALL) -m 0644 contrib/completions/_vramctl $(DESTDIR)$(ZSHCOMPDIR)/_vramctl"; \
	  $(INSTALL) -m 0644 contrib/completions/_vramctl $(DESTDIR)$(ZSHCOMPDIR)/_vramctl; fi

# Removes the files install writes (whether or not they came from this tree's man/ and
# completions), then the directories of ours that are left empty.
uninstall:
	rm -f $(INSTALL_BINS:%=$(DESTDIR)$(BINDIR)/%)
	rm -f $(INSTALL_SIM_BINS:%=$(DESTDIR)$(PKGLIBDIR)/%) $(INSTALL_SIM_LIBS:%=$(DESTDIR)$(PKGLIBDIR)/%) \
	  $(INSTALL_LIBS:%=$(DESTDIR)$(PKGLIBDIR)/%)
	rm -f $(DESTDIR)$(UNITDIR)/vramd.service
	rm -f $(DESTDIR)$(MANDIR)/man8/vramd.8 $(DESTDIR)$(MANDIR)/man1/vramctl.1 $(DESTDIR)$(MANDIR)/man5/vramd.yaml.5
	rm -f $(INSTALL_MANS:man/%=$(DESTDIR)$(MANDIR)/man*/%)
	rm -f $(DESTDIR)$(BASHCOMPDIR)/vramctl $(DESTDIR)$(ZSHCOMPDIR)/_vramctl
	rm -rf $(DESTDIR)$(DOCDIR)
	-rmdir $(DESTDIR)$(PKGLIBDIR) 2>/dev/null
