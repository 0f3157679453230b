import type { EntitySchema } from "@mikro-orm/core";
import { Hoster } from "./hosters/hoster.entity.ts";
import { HosterModel } from "./hosters/hoster-model.entity.ts";
import { Product } from "./products/product.entity.ts";

/** Every entity of the registry schema, for openDatabase. */
export const entities = [Hoster, HosterModel, Product] as unknown as EntitySchema[];
