"""Package data: the rendered Flux bundle (hack/flux-bundle.sh)."""
