# Schema checks of deploy/ (pkg/config TestDeployManifestsMatchTheirSchemas): kubernetes-validate
# ships the Kubernetes API's JSON schemas for every recent version inside its PyPI package, so the
# k8s manifests are checked offline against the published schemas (strict: unknown fields fail).
# The compose file is checked against the compose-spec schema that compose-go embeds (a Go test
# dependency of pkg, nothing to install here).
KUBEVAL_DEPS  := kubernetes-validate==1.37.0 jsonschema==4.26.0 jsonschema-specifications==2025.9.1 \
	referencing==0.37.0 rpds-py==2026.9.1 attrs==26.1.0 importlib_resources==7.1.0 PyYAML==6.0.4 \
	packaging==26.4 typing_extensions==4.16.0
KUBEVAL_STAMP := $(VENV)/.kubernetes-validate.ok

.PHONY: deploy-schema-setup
setup: deploy-schema-setup
deploy-schema-setup: $(KUBEVAL_STAMP)

$(KUBEVAL_STAMP): $(VENV)/.ok mk/deploy.mk
	$(VPY) -m pip install --quiet --disable-pip-version-check $(KUBEVAL_DEPS)
	touch $@
