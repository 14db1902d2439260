// etcd for duet's Kubernetes tests: the etcd server of go.etcd.io/etcd/server/v3, at the version
// the pinned Kubernetes release builds against.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
