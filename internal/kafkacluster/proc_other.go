//go:build !linux && !darwin

package kafkacluster

import (
	"context"
	"errors"
	"os"
	"syscall"
)

var errPlatform = errors.New("kafkacluster: process control needs Linux or macOS")

func sysProcAttr(bool) *syscall.SysProcAttr            { return nil }
func signalPause(*os.Process) error                    { return errPlatform }
func signalResume(*os.Process) error                   { return errPlatform }
func terminate(int)                                    {}
func forceKill(int)                                    {}
func alive(int) bool                                   { return false }
func lockFile(context.Context, string) (func(), error) { return nil, errPlatform }
