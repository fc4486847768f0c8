# Python client (clients/python): installed into the tools venv from this folder, with its
# dependencies pinned here (nats-py with nkeys, msgpack; mypy checks its types). The tests in
# e2e/contract_test.go run it against a real mesh. Reinstalled when its sources change.
PYCLIENT_DIR   := clients/python
PYCLIENT_SRC   := $(shell find $(PYCLIENT_DIR) \( -name '*.py' -o -name '*.toml' -o -name '*.md' -o -name py.typed \) -not -path '*/build/*')
PYCLIENT_DEPS  := nats-py[nkeys]==2.16.0 nkeys==0.2.1 msgpack==1.2.4 setuptools==84.2.1 mypy==2.4.1
PYCLIENT_STAMP := $(VENV)/.skein-client.ok

.PHONY: python-client-setup
setup: python-client-setup
python-client-setup: $(PYCLIENT_STAMP)

$(PYCLIENT_STAMP): $(VENV)/.ok $(PYCLIENT_SRC) mk/python-client.mk
	$(VPY) -m pip install --quiet --disable-pip-version-check $(PYCLIENT_DEPS)
	$(VPY) -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation --force-reinstall ./$(PYCLIENT_DIR)
	touch $@
