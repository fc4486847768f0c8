# The container image (deploy/docker/Dockerfile): one image, every role, the role chosen by the
# container's command. `make image` builds it with docker or podman, whichever is installed
# (ENGINE=... picks one); IMAGE names it. `make image-stage` runs only the Dockerfile's build
# stage, as a script, into IMAGE_STAGE: what CI checks where no engine runs (e2e
# TestImageBuildStage runs the same script on a copy of the build context).
IMAGE       ?= skein:latest
IMAGE_STAGE ?= $(ROOT)/.image-stage
ENGINE      ?= $(shell command -v docker 2>/dev/null || command -v podman 2>/dev/null)

.PHONY: image image-stage
image:
	@test -n "$(ENGINE)" || { echo "make image: no docker or podman on PATH (ENGINE=... names another); 'make image-stage' runs the build stage without one" >&2; exit 1; }
	$(ENGINE) build --build-arg VERSION=$(VERSION) -f deploy/docker/Dockerfile -t $(IMAGE) .

image-stage:
	deploy/docker/build-stage.sh $(IMAGE_STAGE)

# CI's check of the image without an engine (.ci/run): the build stage from a copy of the build
# context, then every role run from what it staged (e2e/image_test.go).
.PHONY: image-check
image-check:
	cd e2e && $(GO) test -count=1 -run '^TestImageBuildStage$$' -timeout 45m -v . -image
