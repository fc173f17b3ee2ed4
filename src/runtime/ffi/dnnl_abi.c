/* Prints the sizes, alignments and constant values of the oneDNN 2.x C API that
 * src/ffi/dnnl.rs declares by hand, one `name value` per line. The unit test
 * `ffi::dnnl::tests::abi_matches_the_installed_header` compiles it against the installed
 * header (Debian libdnnl-dev) and compares every line with the Rust side. */
#include <stdio.h>
#include <stddef.h>
#include <oneapi/dnnl/dnnl.h>

#define SIZE(t) printf("sizeof_" #t " %zu\nalignof_" #t " %zu\n", sizeof(t), _Alignof(t))
#define VALUE(c) printf(#c " %lld\n", (long long)(c))

int main(void) {
    SIZE(dnnl_memory_desc_t);
    SIZE(dnnl_convolution_desc_t);
    SIZE(dnnl_deconvolution_desc_t);
    SIZE(dnnl_inner_product_desc_t);
    SIZE(dnnl_matmul_desc_t);
    SIZE(dnnl_eltwise_desc_t);
    SIZE(dnnl_layer_normalization_desc_t);
    SIZE(dnnl_batch_normalization_desc_t);
    SIZE(dnnl_softmax_desc_t);
    SIZE(dnnl_pooling_desc_t);
    SIZE(dnnl_binary_desc_t);
    SIZE(dnnl_exec_arg_t);
    SIZE(dnnl_version_t);
    SIZE(dnnl_dims_t);
    printf("offsetof_dnnl_version_t_hash %zu\n", offsetof(dnnl_version_t, hash));
    printf("offsetof_dnnl_version_t_cpu_runtime %zu\n", offsetof(dnnl_version_t, cpu_runtime));
    VALUE(DNNL_MAX_NDIMS);
    VALUE(DNNL_RUNTIME_DIM_VAL);
    VALUE(dnnl_success);
    VALUE(dnnl_out_of_memory);
    VALUE(dnnl_invalid_arguments);
    VALUE(dnnl_unimplemented);
    VALUE(dnnl_iterator_ends);
    VALUE(dnnl_runtime_error);
    VALUE(dnnl_not_required);
    VALUE(dnnl_data_type_undef);
    VALUE(dnnl_f16);
    VALUE(dnnl_bf16);
    VALUE(dnnl_f32);
    VALUE(dnnl_s32);
    VALUE(dnnl_s8);
    VALUE(dnnl_u8);
    VALUE(dnnl_format_tag_undef);
    VALUE(dnnl_format_tag_any);
    VALUE(dnnl_a);
    VALUE(dnnl_ab);
    VALUE(dnnl_abc);
    VALUE(dnnl_abcd);
    VALUE(dnnl_abcde);
    VALUE(dnnl_abcdef);
    VALUE(dnnl_ba);
    VALUE(dnnl_acb);
    VALUE(dnnl_abdc);
    VALUE(dnnl_aBcd16b);
    VALUE(dnnl_cpu);
    VALUE(dnnl_stream_default_flags);
    VALUE(dnnl_forward_inference);
    VALUE(dnnl_convolution_direct);
    VALUE(dnnl_convolution_winograd);
    VALUE(dnnl_deconvolution_direct);
    VALUE(dnnl_eltwise_relu);
    VALUE(dnnl_eltwise_tanh);
    VALUE(dnnl_eltwise_logistic);
    VALUE(dnnl_eltwise_clip);
    VALUE(dnnl_eltwise_linear);
    VALUE(dnnl_eltwise_exp);
    VALUE(dnnl_eltwise_sqrt);
    VALUE(dnnl_eltwise_abs);
    VALUE(dnnl_eltwise_gelu_tanh);
    VALUE(dnnl_eltwise_gelu_erf);
    VALUE(dnnl_eltwise_swish);
    VALUE(dnnl_eltwise_mish);
    VALUE(dnnl_pooling_max);
    VALUE(dnnl_pooling_avg_include_padding);
    VALUE(dnnl_pooling_avg_exclude_padding);
    VALUE(dnnl_binary_add);
    VALUE(dnnl_binary_mul);
    VALUE(dnnl_binary_sub);
    VALUE(dnnl_binary_div);
    VALUE(dnnl_binary_max);
    VALUE(dnnl_binary_min);
    VALUE(dnnl_use_global_stats);
    VALUE(dnnl_fuse_norm_relu);
    VALUE(dnnl_use_scale);
    VALUE(dnnl_use_shift);
    VALUE(dnnl_scratchpad_mode_library);
    VALUE(dnnl_scratchpad_mode_user);
    VALUE(dnnl_query_impl_info_str);
    VALUE(dnnl_query_src_md);
    VALUE(dnnl_query_weights_md);
    VALUE(dnnl_query_dst_md);
    VALUE(dnnl_query_workspace_md);
    VALUE(dnnl_query_scratchpad_md);
    VALUE(DNNL_ARG_SRC);
    VALUE(DNNL_ARG_SRC_1);
    VALUE(DNNL_ARG_DST);
    VALUE(DNNL_ARG_WEIGHTS);
    VALUE(DNNL_ARG_BIAS);
    VALUE(DNNL_ARG_MEAN);
    VALUE(DNNL_ARG_VARIANCE);
    VALUE(DNNL_ARG_SCALE);
    VALUE(DNNL_ARG_SHIFT);
    VALUE(DNNL_ARG_WORKSPACE);
    VALUE(DNNL_ARG_SCRATCHPAD);
    VALUE(DNNL_ARG_FROM);
    VALUE(DNNL_ARG_TO);
    VALUE(DNNL_ARG_ATTR_MULTIPLE_POST_OP_BASE);
    VALUE(DNNL_ARG_ATTR_MULTIPLE_POST_OP(0));
    VALUE(DNNL_ARG_ATTR_MULTIPLE_POST_OP(1));
    VALUE(DNNL_RUNTIME_SEQ);
    VALUE(DNNL_RUNTIME_OMP);
    VALUE(DNNL_RUNTIME_TBB);
    VALUE(DNNL_RUNTIME_THREADPOOL);
    return 0;
}
