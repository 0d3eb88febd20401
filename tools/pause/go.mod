module kyma-gpu.local/tools/pause

go 1.26.0
