//go:build unix && !linux

package main

import "syscall"

func umask(m int) int { return syscall.Umask(m) }
