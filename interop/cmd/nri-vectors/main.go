// Command nri-vectors writes deterministic protobuf test vectors for every
// message type of the NRI API (github.com/containerd/nri/pkg/api) and checks
// vectors re-encoded by the Rust side against them.
//
// See interop/README.md for the CLI and the output format.
package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/containerd/nri/pkg/api"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
)

// Exit codes.
const (
	exitOK     = 0
	exitFailed = 1 // semantic mismatch or missing file (check)
	exitUsage  = 2
	exitIO     = 3 // cannot read/write vectors
)

// maxDepth bounds message nesting: a message field at this depth is set to
// an empty (present) message.
const maxDepth = 4

const usage = `usage:
  nri-vectors gen DIR     write DIR/<Message>.bin and DIR/index.json
  nri-vectors check DIR   compare DIR/<Message>.rs.bin with DIR/<Message>.bin
  nri-vectors list        print the message names, one per line
  nri-vectors dump FILE [NAME]
                          print FILE decoded as message NAME (default: the
                          file name up to the first ".bin"/".rs.bin") as text
`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(exitUsage)
	}
	var code int
	switch {
	case os.Args[1] == "gen" && len(os.Args) == 3:
		code = gen(os.Args[2])
	case os.Args[1] == "check" && len(os.Args) == 3:
		code = check(os.Args[2])
	case os.Args[1] == "list" && len(os.Args) == 2:
		for _, md := range messages() {
			fmt.Println(vectorName(md))
		}
	case os.Args[1] == "dump" && (len(os.Args) == 3 || len(os.Args) == 4):
		name := strings.TrimSuffix(strings.TrimSuffix(filepath.Base(os.Args[2]), ".bin"), ".rs")
		if len(os.Args) == 4 {
			name = os.Args[3]
		}
		code = dump(os.Args[2], name)
	default:
		fmt.Fprint(os.Stderr, usage)
		code = exitUsage
	}
	os.Exit(code)
}

// messages lists every message type of the API file, nested ones included,
// map-entry types excluded, in declaration order.
func messages() []protoreflect.MessageDescriptor {
	var out []protoreflect.MessageDescriptor
	var walk func(protoreflect.MessageDescriptors)
	walk = func(mds protoreflect.MessageDescriptors) {
		for i := 0; i < mds.Len(); i++ {
			md := mds.Get(i)
			if md.IsMapEntry() {
				continue
			}
			out = append(out, md)
			walk(md.Messages())
		}
	}
	walk(api.File_pkg_api_api_proto.Messages())
	return out
}

// vectorName is the file stem for a message: its name relative to the
// package (so a nested type is Outer.Inner).
func vectorName(md protoreflect.MessageDescriptor) string {
	pkg := string(md.ParentFile().Package())
	return strings.TrimPrefix(string(md.FullName()), pkg+".")
}

func newMessage(md protoreflect.MessageDescriptor) (protoreflect.Message, error) {
	mt, err := protoregistry.GlobalTypes.FindMessageByName(md.FullName())
	if err != nil {
		return nil, err
	}
	return mt.New(), nil
}

func dump(path, name string) int {
	for _, md := range messages() {
		if vectorName(md) != name {
			continue
		}
		b, err := os.ReadFile(path)
		if err != nil {
			fmt.Fprintf(os.Stderr, "%v\n", err)
			return exitIO
		}
		m, err := newMessage(md)
		if err != nil {
			fmt.Fprintf(os.Stderr, "%v\n", err)
			return exitIO
		}
		if err := proto.Unmarshal(b, m.Interface()); err != nil {
			fmt.Fprintf(os.Stderr, "unmarshal %s as %s: %v\n", path, name, err)
			return exitFailed
		}
		fmt.Println(prototext.MarshalOptions{Multiline: true, EmitUnknown: true}.Format(m.Interface()))
		return exitOK
	}
	fmt.Fprintf(os.Stderr, "unknown message %q\n", name)
	return exitUsage
}

var marshalOpts = proto.MarshalOptions{Deterministic: true}

type indexEntry struct {
	Name     string `json:"name"`
	FullName string `json:"full_name"`
	File     string `json:"file"`
	Size     int    `json:"size"`
	SHA256   string `json:"sha256"`
}

type index struct {
	Source   string       `json:"source"`
	Package  string       `json:"package"`
	Count    int          `json:"count"`
	Messages []indexEntry `json:"messages"`
}

func gen(dir string) int {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		fmt.Fprintf(os.Stderr, "mkdir %s: %v\n", dir, err)
		return exitIO
	}
	idx := index{
		Source:  "github.com/containerd/nri/pkg/api v0.12.5 (" + api.File_pkg_api_api_proto.Path() + ")",
		Package: string(api.File_pkg_api_api_proto.Package()),
	}
	for _, md := range messages() {
		m, err := newMessage(md)
		if err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", md.FullName(), err)
			return exitIO
		}
		fill(m, 0, 0)
		b, err := marshalOpts.Marshal(m.Interface())
		if err != nil {
			fmt.Fprintf(os.Stderr, "marshal %s: %v\n", md.FullName(), err)
			return exitIO
		}
		name := vectorName(md)
		file := name + ".bin"
		if err := writeFileIfChanged(filepath.Join(dir, file), b); err != nil {
			fmt.Fprintf(os.Stderr, "%v\n", err)
			return exitIO
		}
		sum := sha256.Sum256(b)
		idx.Messages = append(idx.Messages, indexEntry{
			Name: name, FullName: string(md.FullName()), File: file,
			Size: len(b), SHA256: hex.EncodeToString(sum[:]),
		})
	}
	idx.Count = len(idx.Messages)
	j, err := json.MarshalIndent(idx, "", "  ")
	if err != nil {
		fmt.Fprintf(os.Stderr, "index: %v\n", err)
		return exitIO
	}
	if err := writeFileIfChanged(filepath.Join(dir, "index.json"), append(j, '\n')); err != nil {
		fmt.Fprintf(os.Stderr, "%v\n", err)
		return exitIO
	}
	fmt.Fprintf(os.Stderr, "wrote %d vectors to %s\n", idx.Count, dir)
	return exitOK
}

// writeFileIfChanged leaves an identical file untouched (keeps mtimes stable).
func writeFileIfChanged(path string, b []byte) error {
	if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, b) {
		return nil
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

type mismatch struct {
	Name   string   `json:"name"`
	Error  string   `json:"error"`
	Fields []string `json:"fields,omitempty"`
}

type checkSummary struct {
	OK             bool       `json:"ok"`
	Total          int        `json:"total"`
	Equal          int        `json:"equal"`
	IdenticalBytes int        `json:"identical_bytes"`
	BytesDiffer    []string   `json:"bytes_differ"`
	Missing        []string   `json:"missing"`
	Mismatched     []mismatch `json:"mismatched"`
	Unknown        []string   `json:"unknown_vectors"`
}

func check(dir string) int {
	byName := map[string]protoreflect.MessageDescriptor{}
	for _, md := range messages() {
		byName[vectorName(md)] = md
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		fmt.Fprintf(os.Stderr, "read %s: %v\n", dir, err)
		return exitIO
	}
	sum := checkSummary{BytesDiffer: []string{}, Missing: []string{}, Mismatched: []mismatch{}, Unknown: []string{}}
	var names []string
	for _, e := range entries {
		n := e.Name()
		if e.IsDir() || !strings.HasSuffix(n, ".bin") || strings.HasSuffix(n, ".rs.bin") {
			continue
		}
		names = append(names, strings.TrimSuffix(n, ".bin"))
	}
	sort.Strings(names)
	for _, name := range names {
		md, ok := byName[name]
		if !ok {
			sum.Unknown = append(sum.Unknown, name)
			continue
		}
		sum.Total++
		goBytes, err := os.ReadFile(filepath.Join(dir, name+".bin"))
		if err != nil {
			sum.Mismatched = append(sum.Mismatched, mismatch{Name: name, Error: err.Error()})
			continue
		}
		rsBytes, err := os.ReadFile(filepath.Join(dir, name+".rs.bin"))
		if errors.Is(err, os.ErrNotExist) {
			sum.Missing = append(sum.Missing, name)
			continue
		} else if err != nil {
			sum.Mismatched = append(sum.Mismatched, mismatch{Name: name, Error: err.Error()})
			continue
		}
		if mm := compare(md, goBytes, rsBytes); mm != nil {
			mm.Name = name
			sum.Mismatched = append(sum.Mismatched, *mm)
			continue
		}
		sum.Equal++
		if bytes.Equal(goBytes, rsBytes) {
			sum.IdenticalBytes++
		} else {
			sum.BytesDiffer = append(sum.BytesDiffer, name)
		}
	}
	if sum.Total == 0 {
		sum.Mismatched = append(sum.Mismatched, mismatch{Name: "", Error: "no <Name>.bin vectors in " + dir})
	}
	sum.OK = len(sum.Missing) == 0 && len(sum.Mismatched) == 0
	j, _ := json.Marshal(sum)
	fmt.Println(string(j))
	if !sum.OK {
		return exitFailed
	}
	return exitOK
}

// compare unmarshals both encodings and reports a semantic difference (nil
// when proto.Equal holds and the Rust bytes carry no unknown fields).
func compare(md protoreflect.MessageDescriptor, goBytes, rsBytes []byte) *mismatch {
	gm, err := newMessage(md)
	if err != nil {
		return &mismatch{Error: err.Error()}
	}
	rm := gm.New()
	if err := proto.Unmarshal(goBytes, gm.Interface()); err != nil {
		return &mismatch{Error: "unmarshal Go vector: " + err.Error()}
	}
	if err := proto.Unmarshal(rsBytes, rm.Interface()); err != nil {
		return &mismatch{Error: "unmarshal Rust vector: " + err.Error()}
	}
	unknown := hasUnknown(rm)
	if proto.Equal(gm.Interface(), rm.Interface()) && !unknown {
		return nil
	}
	mm := &mismatch{Error: "messages differ", Fields: diffFields(gm, rm, "")}
	if unknown {
		mm.Error = "Rust encoding has unknown fields (wrong field number or wire type?)"
	}
	return mm
}

// hasUnknown reports unknown fields anywhere in m.
func hasUnknown(m protoreflect.Message) bool {
	if len(m.GetUnknown()) > 0 {
		return true
	}
	found := false
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsMap():
			if fd.MapValue().Message() != nil {
				v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
					found = found || hasUnknown(mv.Message())
					return !found
				})
			}
		case fd.IsList():
			if fd.Message() != nil {
				for i := 0; i < v.List().Len() && !found; i++ {
					found = hasUnknown(v.List().Get(i).Message())
				}
			}
		case fd.Message() != nil:
			found = hasUnknown(v.Message())
		}
		return !found
	})
	return found
}

// diffFields names the fields (dotted paths into singular sub-messages)
// whose values differ.
func diffFields(a, b protoreflect.Message, prefix string) []string {
	var out []string
	fields := a.Descriptor().Fields()
	for i := 0; i < fields.Len(); i++ {
		fd := fields.Get(i)
		path := prefix + string(fd.Name())
		if a.Has(fd) != b.Has(fd) {
			out = append(out, path)
			continue
		}
		if !a.Has(fd) {
			continue
		}
		if fd.Message() != nil && !fd.IsList() && !fd.IsMap() {
			out = append(out, diffFields(a.Get(fd).Message(), b.Get(fd).Message(), path+".")...)
			continue
		}
		ca, cb := a.New(), b.New()
		ca.Set(fd, a.Get(fd))
		cb.Set(fd, b.Get(fd))
		if !proto.Equal(ca.Interface(), cb.Interface()) {
			out = append(out, path)
		}
	}
	return out
}
