package nodesim

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// A container process is started from a thread of this process that first
// makes itself the container's sandbox: a mount namespace of its own whose
// root is a fresh tmpfs holding only the program, /proc, a few devices and
// the Pod's files (volumes, resolv.conf, hosts), a UTS namespace with the
// Pod's hostname, and the Pod's network namespace. A child inherits the
// namespaces and root of the thread that forks it, so nothing is mounted
// where the host or the other Pods can see it, and nothing outlives the
// process. The thread stays locked for the life of the process (it waits
// for it), so the runtime never reuses it, and the process is killed if
// the simulator dies (parent-death signal).

// bindMount puts Source (a file or folder of this machine) at Target
// inside the container's root.
type bindMount struct {
	Source, Target string
	ReadOnly       bool
}

// sandboxSpec is one start of a container.
type sandboxSpec struct {
	// NetNS is the network namespace's file (the Pod's, or its node's for
	// hostNetwork).
	NetNS    string
	Root     string // an empty folder that becomes the root
	Hostname string
	Argv     []string
	Env      []string
	Dir      string // working folder inside the root; "/" when empty
	// ImageDirs are the machine's folders that make up the image (see
	// Program.ImageDirs), each under a writable layer of its own as in a
	// container's root, so that mount points can be made inside them; a
	// folder that is a symbolic link here is the same link in the root.
	ImageDirs []string
	Mounts    []bindMount
	Log       *os.File
	// Security is the process's user, capabilities and root's
	// writability.
	Security security
}

// devices are bound from the host into every container's /dev.
var devices = []string{"null", "zero", "full", "random", "urandom"}

// containerProcess is a started container.
type containerProcess struct {
	pid  int
	done chan struct{}
	// exitCode is set when done is closed: the process's exit status, or
	// 128+N when signal N ended it, as container runtimes report.
	exitCode int32
}

// spawn starts spec's process and returns once it runs.
func spawn(spec sandboxSpec) (*containerProcess, error) {
	if len(spec.Argv) == 0 {
		return nil, errors.New("no command: the container has no command and the image no entrypoint")
	}
	started := make(chan error, 1)
	p := &containerProcess{done: make(chan struct{})}
	go func() {
		// Never unlocked: the thread is the container's now, and the
		// runtime ends it with this goroutine.
		runtime.LockOSThread()
		if err := enterSandbox(spec); err != nil {
			started <- err
			return
		}
		path, err := lookPath(spec.Argv[0], spec.Env)
		if err != nil {
			started <- err
			return
		}
		dir := spec.Dir
		if dir == "" {
			dir = "/"
		}
		attr := &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		if err := restrict(spec.Security, attr); err != nil {
			started <- err
			return
		}
		cmd := &exec.Cmd{
			Path: path, Args: spec.Argv, Env: spec.Env, Dir: dir, Stdout: spec.Log, Stderr: spec.Log,
			SysProcAttr: attr,
		}
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		p.pid = cmd.Process.Pid
		started <- nil
		_ = cmd.Wait()
		p.exitCode = exitCode(cmd.ProcessState)
		close(p.done)
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	return p, nil
}

func exitCode(st *os.ProcessState) int32 {
	if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int32(ws.Signal())
	}
	return int32(st.ExitCode())
}

// signal sends sig to the container's process group.
func (p *containerProcess) signal(sig syscall.Signal) {
	_ = syscall.Kill(-p.pid, sig)
}

// stop asks the process to end (SIGTERM) and kills it once grace has
// passed, as a container runtime does; it returns when the process is gone.
func (p *containerProcess) stop(grace time.Duration) {
	p.signal(syscall.SIGTERM)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-p.done:
		return
	case <-t.C:
	}
	p.signal(syscall.SIGKILL)
	<-p.done
}

// enterSandbox turns the calling (locked) thread into the container's
// sandbox; see the top of this file.
func enterSandbox(spec sandboxSpec) error {
	netns, err := os.Open(spec.NetNS)
	if err != nil {
		return fmt.Errorf("opening the network namespace: %w", err)
	}
	defer netns.Close()
	if err := unix.Unshare(unix.CLONE_NEWNS | unix.CLONE_NEWUTS); err != nil {
		return fmt.Errorf("creating the container's mount namespace: %w", err)
	}
	// Nothing mounted from here on propagates back to the host.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("making the mounts private: %w", err)
	}
	if err := buildRoot(spec); err != nil {
		return err
	}
	if spec.Hostname != "" {
		if err := unix.Sethostname([]byte(spec.Hostname)); err != nil {
			return fmt.Errorf("setting the hostname: %w", err)
		}
	}
	if err := unix.Setns(int(netns.Fd()), unix.CLONE_NEWNET); err != nil {
		return fmt.Errorf("entering the network namespace: %w", err)
	}
	if err := unix.Chroot(spec.Root); err != nil {
		return fmt.Errorf("entering the container's root: %w", err)
	}
	return unix.Chdir("/")
}

// buildRoot mounts a tmpfs at spec.Root and puts into it /proc, /dev's
// usual devices, /tmp and the bind mounts.
func buildRoot(spec sandboxSpec) error {
	root := spec.Root
	if err := unix.Mount("tmpfs", root, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0755"); err != nil {
		return fmt.Errorf("mounting the container's root: %w", err)
	}
	for _, d := range []string{"proc", "dev", "etc", "tmp"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			return err
		}
	}
	if err := os.Chmod(filepath.Join(root, "tmp"), 0o1777|os.ModeSticky); err != nil {
		return err
	}
	if err := unix.Mount("proc", filepath.Join(root, "proc"), "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mounting /proc: %w", err)
	}
	if err := imageLayers(spec); err != nil {
		return err
	}
	mounts := make([]bindMount, 0, len(devices)+len(spec.Mounts))
	for _, d := range devices {
		mounts = append(mounts, bindMount{Source: "/dev/" + d, Target: "/dev/" + d})
	}
	for _, m := range append(mounts, spec.Mounts...) {
		if err := bind(root, m); err != nil {
			return err
		}
	}
	if spec.Security.ReadOnlyRoot {
		return readOnlyRoot(spec)
	}
	return nil
}

// readOnlyRoot makes the root and the image's layers read-only; the
// volumes mounted in them keep their own mode.
func readOnlyRoot(spec sandboxSpec) error {
	targets := []string{spec.Root}
	for _, d := range spec.ImageDirs {
		if _, err := os.Readlink(d); err != nil {
			targets = append(targets, filepath.Join(spec.Root, d))
		}
	}
	for _, t := range targets {
		if err := unix.Mount("", t, "", unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
			return fmt.Errorf("making %s read-only (readOnlyRootFilesystem): %w", strings.TrimPrefix(t, spec.Root), err)
		}
	}
	return nil
}

// restrict applies sec on the calling thread, which forks the container's
// process and is never used again, and in attr: no_new_privs, and either
// another user (who keeps no capability) or root limited to sec.Caps.
func restrict(sec security, attr *syscall.SysProcAttr) error {
	if sec.NoNewPrivs {
		if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
			return fmt.Errorf("allowPrivilegeEscalation false: %w", err)
		}
	}
	if sec.UID != 0 {
		attr.Credential = &syscall.Credential{Uid: uint32(sec.UID), Gid: uint32(sec.GID), NoSetGroups: true}
		return nil
	}
	if sec.GID != 0 {
		attr.Credential = &syscall.Credential{Gid: uint32(sec.GID), NoSetGroups: true}
	}
	if sec.Privileged {
		return nil
	}
	return keepCaps(sec.Caps)
}

// keepCaps limits the thread's bounding, permitted, effective and
// inheritable sets to caps; a root process it starts gets exactly those.
func keepCaps(caps []uintptr) error {
	last, err := lastCap()
	if err != nil {
		return err
	}
	var data [2]unix.CapUserData
	for c := uintptr(0); c <= last; c++ {
		if slices.Contains(caps, c) {
			data[c/32].Effective |= 1 << (c % 32)
			continue
		}
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, c, 0, 0, 0); err != nil {
			return fmt.Errorf("dropping capability %d: %w", c, err)
		}
	}
	for i := range data {
		data[i].Permitted, data[i].Inheritable = data[i].Effective, data[i].Effective
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("setting capabilities: %w", err)
	}
	return nil
}

// lastCap is the kernel's highest capability number.
func lastCap() (uintptr, error) {
	b, err := os.ReadFile("/proc/sys/kernel/cap_last_cap")
	if err != nil {
		return 0, err
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	return uintptr(n), err
}

// imageLayers mounts each of spec.ImageDirs at the same path in the root
// as an overlay: the machine's folder read-only below, a tmpfs above that
// takes the container's writes (and mount points) and goes with it.
func imageLayers(spec sandboxSpec) error {
	if len(spec.ImageDirs) == 0 {
		return nil
	}
	layers := spec.Root + ".layers"
	if err := os.MkdirAll(layers, 0o700); err != nil {
		return err
	}
	if err := unix.Mount("tmpfs", layers, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0700"); err != nil {
		return fmt.Errorf("mounting the image's writable layer: %w", err)
	}
	for i, d := range spec.ImageDirs {
		target := filepath.Join(spec.Root, d)
		if link, err := os.Readlink(d); err == nil {
			if err := os.Symlink(link, target); err != nil {
				return fmt.Errorf("image link %s: %w", d, err)
			}
			continue
		}
		upper, work := filepath.Join(layers, strconv.Itoa(i), "upper"), filepath.Join(layers, strconv.Itoa(i), "work")
		for _, dir := range []string{upper, work, target} {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return err
			}
		}
		opts := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s", d, upper, work)
		if err := unix.Mount("overlay", target, "overlay", 0, opts); err != nil {
			return fmt.Errorf("mounting the image's %s: %w", d, err)
		}
	}
	return nil
}

// bind mounts m.Source at m.Target under root, making the mount point (a
// folder or an empty file, as the source is) first.
func bind(root string, m bindMount) error {
	fi, err := os.Stat(m.Source)
	if err != nil {
		return fmt.Errorf("mount of %s: %w", m.Target, err)
	}
	target := filepath.Join(root, filepath.Clean("/"+m.Target))
	if fi.IsDir() {
		err = os.MkdirAll(target, 0o755)
	} else if err = os.MkdirAll(filepath.Dir(target), 0o755); err == nil {
		var f *os.File
		if f, err = os.OpenFile(target, os.O_CREATE|os.O_WRONLY, 0o644); err == nil {
			err = f.Close()
		}
	}
	if err != nil {
		return fmt.Errorf("mount point %s: %w", m.Target, err)
	}
	if err := unix.Mount(m.Source, target, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("mounting %s at %s: %w", m.Source, m.Target, err)
	}
	if m.ReadOnly {
		if err := unix.Mount("", target, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
			return fmt.Errorf("making %s read-only: %w", m.Target, err)
		}
	}
	return nil
}

// lookPath finds name as the container would: a path is taken as it is,
// a bare name is searched in the container's PATH. It runs inside the
// container's root.
func lookPath(name string, env []string) (string, error) {
	if strings.Contains(name, "/") {
		return name, nil
	}
	path := "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
		}
	}
	for _, dir := range filepath.SplitList(path) {
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("executable %q not found in $PATH", name)
}
