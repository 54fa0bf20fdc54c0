package main

import (
	"fmt"

	"google.golang.org/protobuf/reflect/protoreflect"
)

// Deterministic population of a message: every field gets a non-default
// value derived from its name, number, nesting depth and element index.
//
//   - singular scalars: signed ints negative, unsigned ints multi-byte,
//     bool true, floats with a fractional part, strings
//     "<field>-d<depth>-<salt>-<i>" plus a non-ASCII suffix, bytes with
//     0x00 and 0xff (salt is the index of the enclosing repeated/map
//     element, so sibling elements differ);
//   - repeated fields: 2 elements (signed: alternating sign);
//   - maps: 3 entries (string keys "<field>-k<i>", int keys -1/2/3 for
//     signed and 1/2/3 for unsigned key types, bool keys false/true);
//   - enums: distinct non-zero values;
//   - messages: filled recursively; at depth maxDepth an empty (present)
//     message.

const listLen = 2
const mapLen = 3

func fill(m protoreflect.Message, depth, salt int) {
	fields := m.Descriptor().Fields()
	for i := 0; i < fields.Len(); i++ {
		fd := fields.Get(i)
		if oo := fd.ContainingOneof(); oo != nil && !oo.IsSynthetic() {
			// Only the first member of a real oneof can be set.
			if oo.Fields().Get(0) != fd {
				continue
			}
		}
		switch {
		case fd.IsMap():
			mp := m.Mutable(fd).Map()
			kd, vd := fd.MapKey(), fd.MapValue()
			for j := 0; j < mapLen; j++ {
				key := mapKey(kd, fd, j)
				if vd.Message() != nil {
					v := mp.NewValue()
					fillOrEmpty(v.Message(), depth, j)
					mp.Set(key, v)
				} else {
					mp.Set(key, scalar(vd, fd, depth, salt, j))
				}
			}
		case fd.IsList():
			l := m.Mutable(fd).List()
			for j := 0; j < listLen; j++ {
				if fd.Message() != nil {
					v := l.NewElement()
					fillOrEmpty(v.Message(), depth, j)
					l.Append(v)
				} else {
					l.Append(scalar(fd, fd, depth, salt, j))
				}
			}
		case fd.Message() != nil:
			fillOrEmpty(m.Mutable(fd).Message(), depth, 0)
		default:
			m.Set(fd, scalar(fd, fd, depth, salt, 0))
		}
	}
}

func fillOrEmpty(m protoreflect.Message, depth, salt int) {
	if depth+1 < maxDepth {
		fill(m, depth+1, salt)
	}
}

func mapKey(kd, fd protoreflect.FieldDescriptor, j int) protoreflect.MapKey {
	switch kd.Kind() {
	case protoreflect.StringKind:
		return protoreflect.ValueOfString(fmt.Sprintf("%s-k%d", fd.Name(), j)).MapKey()
	case protoreflect.BoolKind:
		return protoreflect.ValueOfBool(j%2 == 1).MapKey()
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		k := int32(j + 1)
		if j == 0 {
			k = -1
		}
		return protoreflect.ValueOfInt32(k).MapKey()
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		k := int64(j + 1)
		if j == 0 {
			k = -1
		}
		return protoreflect.ValueOfInt64(k).MapKey()
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return protoreflect.ValueOfUint32(uint32(j + 1)).MapKey()
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return protoreflect.ValueOfUint64(uint64(j + 1)).MapKey()
	}
	panic(fmt.Sprintf("unsupported map key kind %v", kd.Kind()))
}

// scalar returns the value for element j of field fd (vd describes the
// value type: fd itself, or the map value of fd).
func scalar(vd, fd protoreflect.FieldDescriptor, depth, salt, j int) protoreflect.Value {
	base := int64(fd.Number()) + 100*int64(depth+1) + 10*int64(salt) + int64(j)
	neg := (j+salt)%2 == 0 // signed: first element negative, second positive
	sign := func(v int64) int64 {
		if neg {
			return -v
		}
		return v
	}
	switch vd.Kind() {
	case protoreflect.BoolKind:
		return protoreflect.ValueOfBool(true)
	case protoreflect.EnumKind:
		return protoreflect.ValueOfEnum(enumValue(vd.Enum(), j+salt))
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return protoreflect.ValueOfInt32(int32(sign(base*1000 + 7)))
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return protoreflect.ValueOfInt64(sign(base<<33 + 5))
	case protoreflect.Uint32Kind:
		return protoreflect.ValueOfUint32(uint32(base*100000 + 3))
	case protoreflect.Fixed32Kind:
		return protoreflect.ValueOfUint32(0xA0000000 + uint32(base))
	case protoreflect.Uint64Kind:
		return protoreflect.ValueOfUint64(uint64(base)<<40 + 9)
	case protoreflect.Fixed64Kind:
		return protoreflect.ValueOfUint64(0xA000000000000000 + uint64(base))
	case protoreflect.FloatKind:
		return protoreflect.ValueOfFloat32(float32(base) + 0.25)
	case protoreflect.DoubleKind:
		return protoreflect.ValueOfFloat64(float64(base) + 0.125)
	case protoreflect.StringKind:
		return protoreflect.ValueOfString(fmt.Sprintf("%s-d%d-%d-%d-\u00e9\u2713", fd.Name(), depth, salt, j))
	case protoreflect.BytesKind:
		return protoreflect.ValueOfBytes(append([]byte(fmt.Sprintf("%s-%d-%d", fd.Name(), salt, j)), 0x00, 0xff))
	}
	panic(fmt.Sprintf("unsupported kind %v for %s", vd.Kind(), fd.FullName()))
}

// enumValue picks the j-th non-zero value of the enum (cycling), or 0 if it
// has none.
func enumValue(ed protoreflect.EnumDescriptor, j int) protoreflect.EnumNumber {
	var nz []protoreflect.EnumNumber
	vals := ed.Values()
	for i := 0; i < vals.Len(); i++ {
		if n := vals.Get(i).Number(); n != 0 {
			nz = append(nz, n)
		}
	}
	if len(nz) == 0 {
		return 0
	}
	return nz[j%len(nz)]
}
