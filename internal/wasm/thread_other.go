//go:build !linux

package wasm

import "time"

func gettid() int { return 0 }

func threadCPU() (time.Duration, bool) { return 0, false }
