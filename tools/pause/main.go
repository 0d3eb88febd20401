// Command pause is the process of the sandbox ("pause") image of the harness's real node
// (tests/harness/realnode.py): it holds a pod's namespaces until it is told to stop.
// containerd needs a sandbox image, and none can be pulled on the test machines.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	<-stop
}
