#include "model/model.h"

#include "model/init.h"

namespace ropelab::model {

ModelImpl::ModelImpl(Transformer b, std::shared_ptr<HeadImpl> h, double init_std) {
  backbone = register_module("backbone", std::move(b));
  head = register_module("head", std::move(h));
  init_weights(*this, init_std);
}

}  // namespace ropelab::model
