// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package container

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
)

// Log rotation as the kubelet's defaults (containerLogMaxSize,
// containerLogMaxFiles) and the CRI runtimes' line buffer.
const (
	DefaultLogMaxSize  = 10 << 20
	DefaultLogMaxFiles = 5
	// maxLogLine is the longest piece of a line written as one entry;
	// longer lines are split into partial (P) entries.
	maxLogLine = 16 << 10
)

// Streams of the CRI log format.
const (
	Stdout = "stdout"
	Stderr = "stderr"
)

// LogFile is a container's output in the CRI log format, one entry per
// line ("<RFC3339Nano> <stream> <F|P> <text>"), the format the kubelet's
// log reader (k8s.io/cri-client/pkg/logs) serves `kubectl logs` from. It
// is rotated by size: the full file is renamed with a timestamp suffix and
// a new one started, keeping at most maxFiles files in all.
type LogFile struct {
	path     string
	maxSize  int64
	maxFiles int
	now      func() time.Time

	mu   sync.Mutex
	f    *os.File
	size int64
}

// OpenLog opens (appending) the log file at path, creating its folder.
func OpenLog(path string, maxSize int64, maxFiles int, now func() time.Time) (*LogFile, error) {
	if now == nil {
		now = time.Now
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	l := &LogFile{path: path, maxSize: maxSize, maxFiles: max(maxFiles, 1), now: now}
	if err := l.open(); err != nil {
		return nil, err
	}
	return l, nil
}

// Path is the file being written.
func (l *LogFile) Path() string { return l.path }

func (l *LogFile) open() error {
	f, err := os.OpenFile(l.path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o640)
	if err != nil {
		return err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return err
	}
	l.f, l.size = f, fi.Size()
	return nil
}

// entry writes one log entry.
func (l *LogFile) entry(stream string, partial bool, text []byte) error {
	tag := "F"
	if partial {
		tag = "P"
	}
	var b bytes.Buffer
	b.Grow(len(text) + 48)
	b.WriteString(l.now().UTC().Format(time.RFC3339Nano))
	b.WriteByte(' ')
	b.WriteString(stream)
	b.WriteByte(' ')
	b.WriteString(tag)
	b.WriteByte(' ')
	b.Write(text)
	b.WriteByte('\n')
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return os.ErrClosed
	}
	n, err := l.f.Write(b.Bytes())
	l.size += int64(n)
	if err != nil {
		return err
	}
	if l.maxSize > 0 && l.size >= l.maxSize {
		return l.rotate()
	}
	return nil
}

// rotate renames the full file, starts a new one and removes the oldest
// rotated files beyond maxFiles; l.mu is held.
func (l *LogFile) rotate() error {
	if err := l.f.Close(); err != nil {
		return err
	}
	l.f = nil
	rotated := fmt.Sprintf("%s.%s", l.path, l.now().UTC().Format("20060102-150405.000000000"))
	if err := os.Rename(l.path, rotated); err != nil {
		return err
	}
	if err := l.open(); err != nil {
		return err
	}
	old, err := filepath.Glob(l.path + ".*")
	if err != nil {
		return err
	}
	slices.Sort(old) // timestamp suffixes sort by age
	for len(old) > l.maxFiles-1 {
		if err := os.Remove(old[0]); err != nil {
			return err
		}
		old = old[1:]
	}
	return nil
}

// Close closes the file.
func (l *LogFile) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return nil
	}
	err := l.f.Close()
	l.f = nil
	return err
}

// Stream is a writer of one stream's output into the log: it writes an
// entry per line, splits lines longer than maxLogLine into partial
// entries, and writes what is left without a newline when closed.
func (l *LogFile) Stream(stream string) io.WriteCloser {
	return &lineWriter{log: l, stream: stream}
}

type lineWriter struct {
	log    *LogFile
	stream string
	buf    []byte
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		switch {
		case i >= 0 && i <= maxLogLine:
			if err := w.log.entry(w.stream, false, w.buf[:i]); err != nil {
				return len(p), err
			}
			w.buf = w.buf[i+1:]
		case len(w.buf) > maxLogLine:
			if err := w.log.entry(w.stream, true, w.buf[:maxLogLine]); err != nil {
				return len(p), err
			}
			w.buf = w.buf[maxLogLine:]
		default:
			w.buf = slices.Clip(w.buf)
			return len(p), nil
		}
	}
}

func (w *lineWriter) Close() error {
	if len(w.buf) == 0 {
		return nil
	}
	err := w.log.entry(w.stream, false, w.buf)
	w.buf = nil
	return err
}

// LogPath is where the kubelet keeps a container's log:
// <root>/<namespace>_<pod>_<uid>/<container>/<restart>.log.
func LogPath(root, namespace, pod, uid, container string, restart int32) string {
	return filepath.Join(root, strings.Join([]string{namespace, pod, uid}, "_"), container, fmt.Sprintf("%d.log", restart))
}
