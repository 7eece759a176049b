#include "proto.h"

const char *rgpu_op_name(unsigned op)
{
	switch (op) {
#define RGPU_OP_NAME(name, num, doc) case num: return #name;
	RGPU_OPS(RGPU_OP_NAME)
	RGPU_OPS_APPMEM(RGPU_OP_NAME)
	RGPU_OPS_GRAPHS(RGPU_OP_NAME)
#undef RGPU_OP_NAME
	}
	return "UNKNOWN";
}
